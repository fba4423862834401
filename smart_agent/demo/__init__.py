"""`jitgpu demo`: a control plane, two simulated GPU nodes and the smart agent on a pipeline."""
