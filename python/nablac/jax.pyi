"""Type stubs for nablac.jax: a nablac kernel called from inside JAX code."""

from typing import Any, Callable, Optional, Sequence, Tuple

def price_and_greeks(
    tape: Any,
    inputs: Optional[Sequence[str]] = None,
    output: Optional[str] = None,
    paths: int = 100_000,
    seed: int = 42,
    target: Optional[str] = None,
    mode: Optional[str] = None,
    precision: Optional[str] = None,
    **options: Any,
) -> Callable[..., Tuple[Any, Any]]:
    """f(*values) -> (price, greeks over `inputs`), callable under jax.jit; jax.vmap over the
    market values runs one nablac ladder."""
    ...

def price(
    tape: Any,
    inputs: Optional[Sequence[str]] = None,
    output: Optional[str] = None,
    **run_options: Any,
) -> Callable[..., Any]:
    """p(*values) -> price, whose jax.grad is nablac's Greeks."""
    ...
