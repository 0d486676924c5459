"""`opgen import PATH_OR_MODULE`: a spec from the ops a package already registers.

- command.py: the CLI (torch-free): runs the worker, prints a located line per op, writes one spec per namespace;
- worker.py: the torch side, in its own process: imports the package, finds its ops in torch's registry, and per op
  derives what the spec says (a crash or hang of the package's code costs its op, never the run);
- symbolic.py: the package's own fake run under symbolic sizes, each output size read back as a semantics rule;
- dtypes.py: each output's dtype rule, by trying the input dtypes the op takes;
- examples.py: inputs the fake accepts (or the `--inputs` file's);
- compare.py: the derived rules against the package's fake and CPU kernel on the tests' input variants;
- sources.py: style, device and locations, read from the package's files by `opgen lint`'s readers;
- spec_text.py: the spec's YAML (torch-free).
"""
