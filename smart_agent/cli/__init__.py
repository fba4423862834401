"""The `jitgpu` command line: one root, subcommands that import their heavy parts lazily."""
