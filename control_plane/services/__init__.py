"""Use cases of the control plane, one database transaction each."""
