"""The Slurm backend: `jitgpu slurm-bridge` keeps jitgpu holds as Slurm reservations."""
