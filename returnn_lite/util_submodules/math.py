"""``returnn_lite.util.math``: the original's ``returnn.util.math`` helpers that model code uses."""

__all__ = ["ceil_div", "next_power_of_two"]


def ceil_div(a, b):
    """ceil(a / b) for ints (also negative ones)."""
    return -(-a // b)


def next_power_of_two(n):
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (int(n) - 1).bit_length()
