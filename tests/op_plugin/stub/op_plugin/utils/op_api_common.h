#pragma once
#include "opgen_stub.h"
