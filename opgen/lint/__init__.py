"""`opgen lint`: a fast, precise check of custom-op registration code (and op_plugin YAML).

Importing this package only registers the lint rules in the shared catalogue (cheap: no ast,
no libcst, no torch); the machinery is imported by the command when it runs.
"""

from . import rules as rules  # registers OPG2xx/OPG3xx/OPG4xx in opgen.contract.RULES
