"""The op_plugin target: op-plugin contributions (YAML entries, OpApi kernels, Meta, tests) from a spec."""
