"""jitgpu control plane: REST API, scheduling core, persistence, jobs and the node agent."""
