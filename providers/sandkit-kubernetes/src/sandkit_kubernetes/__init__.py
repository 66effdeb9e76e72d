"""sandkit's Kubernetes provider: one hardened pod per (user, thread), the agent inside."""

from .options import KubernetesOptions
from .provider import KubernetesProvider, KubernetesSandbox

__all__ = ["KubernetesOptions", "KubernetesProvider", "KubernetesSandbox"]
