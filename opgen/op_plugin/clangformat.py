"""clang-format over the C++ opgen writes, with the op-plugin checkout's own `.clang-format` (`opgen add`) or
opgen's statement of its rules (`opgen new`); clang-format comes from PyPI (`pip install clang-format`, in the
op_plugin extra). Without it the kernels keep the layout opgen writes them in (kernel.py), which follows the
same rules for what opgen itself writes (signature, allocation and call lines)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

# op-plugin's .clang-format, the rules that decide how opgen's kernels look (written here, not copied)
STYLE = ("{BasedOnStyle: LLVM, ColumnLimit: 120, IndentWidth: 2, ContinuationIndentWidth: 4, "
         "AlignAfterOpenBracket: AlwaysBreak, BinPackArguments: false, BinPackParameters: false, "
         "AllowAllParametersOfDeclarationOnNextLine: false, AllowShortFunctionsOnASingleLine: Empty, "
         "AllowShortBlocksOnASingleLine: false, AllowShortIfStatementsOnASingleLine: false, "
         "AllowShortLoopsOnASingleLine: false, AlwaysBreakTemplateDeclarations: true, BreakStringLiterals: false, "
         "PointerAlignment: Left, DerivePointerAlignment: false, SortIncludes: false, "
         "SpacesBeforeTrailingComments: 1, NamespaceIndentation: None, Cpp11BracedListStyle: true, "
         "IndentCaseLabels: true, Standard: c++17}")


def executable() -> str | None:
    found = shutil.which("clang-format")
    if found:
        return found
    try:
        import clang_format
    except ImportError:
        return None
    path = clang_format.get_executable("clang-format")
    return path if os.path.isfile(path) else None


def format_cpp(text: str, style_file: Path | None = None) -> str | None:
    """`text` formatted (None when clang-format is not installed or fails on it)."""
    program = executable()
    if program is None:
        return None
    style = f"file:{style_file}" if style_file is not None else STYLE
    try:
        done = subprocess.run([program, f"--style={style}", "--assume-filename=KernelNpuOpApi.cpp"], input=text,
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None
