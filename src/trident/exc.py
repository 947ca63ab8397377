"""Every exception Trident shows a user, one class per diagnosis."""
from __future__ import annotations


class TridentError(Exception):
    """Base class of Trident's own errors."""


class UnsupportedConstruct(TridentError):
    """The function does something Trident cannot capture (data-dependent control flow, .item(), ...).

    The message names the construct and the user's source line."""


class KeptFromEarlierCapture(UnsupportedConstruct):
    """The function reads a tensor an earlier capture computed from its arguments and something kept (a library
    cache). Raised, not run eagerly: the kept value is that capture's fake tensor, which eager cannot compute
    with either."""


class UnsupportedArgument(TridentError):
    """An argument of a kind Trident cannot pass to compiled code."""


class UnsupportedSignature(TridentError):
    """The jitted function's signature cannot be bound natively (*args / **kwargs)."""


class LoweringError(TridentError):
    """An internal compiler failure; the message says where the IR for reproduction was written."""


class GuardMismatch(TridentError):
    """No compiled specialization matches a call (raised only by explicit checks such as explain tooling)."""


class ExecutionError(TridentError):
    """Compiled code failed in a way that has no eager equivalent."""


class KernelLaunchError(TridentError, RuntimeError):
    """The CUDA driver refused a native Triton kernel launch; the message names the kernel and the CUDA error.

    A RuntimeError too, like the error Triton's own launcher raises for the same failure."""


class InvalidOption(TridentError, ValueError):
    """An option given to Trident's torch.compile backend (`options={...}`) that it does not know, or a value of
    the wrong type; the message names the option and lists the valid ones."""
