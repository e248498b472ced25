"""gangscope: why a distributed training job on Kubernetes is stuck or slow."""

__version__ = "0.1.0"
