#!/usr/bin/env python3
"""Writes the text tape of an arithmetic Asian call whose vol is a term structure of B buckets:
inputs spot, strike, rate, maturity and vol1..volB (B + 4 inputs, one output), N equal steps,
step i in bucket floor(i * B / N). Every input reaches the one output, so forward mode needs
B + 4 tangent directions and reverse mode one adjoint lane: the benchmark tape where reverse
mode should win (issue 10's cost model is fitted on it beside the five-input products).

usage: scripts/bucketed-asian.py [--steps N] [--buckets B] > asian_buckets.ntape
"""
import argparse


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=252)
    p.add_argument("--buckets", type=int, default=12)
    a = p.parse_args()
    n, b = a.steps, a.buckets
    if not (1 <= b <= n):
        p.error("need 1 <= buckets <= steps")
    lines = ["nablatape 1",
             f"# Arithmetic Asian call, {n} steps, vol in {b} buckets (scripts/bucketed-asian.py)."]
    k = 0

    def node(text):
        nonlocal k
        lines.append(f"%{k} = {text}")
        k += 1
        return k - 1

    spot = node("input spot 100.0")
    strike = node("input strike 100.0")
    rate = node("input rate 0.03")
    maturity = node("input maturity 1.0")
    vols = [node(f"input vol{j + 1} {0.2 + 0.005 * j:.3f}") for j in range(b)]
    half = node("const 0.5")
    dt = node(f"div %{maturity} %{node(f'const {float(n)}')}")
    sqrt_dt = node(f"sqrt %{dt}")
    drift, diffusion = [], []
    for v in vols:
        var = node(f"mul %{v} %{v}")
        mu = node(f"sub %{rate} %{node(f'mul %{half} %{var}')}")
        drift.append(node(f"mul %{mu} %{dt}"))
        diffusion.append(node(f"mul %{v} %{sqrt_dt}"))
    s, total = spot, node("const 0.0")
    for i in range(n):
        j = i * b // n
        z = node(f"normal {i}")
        x = node(f"add %{drift[j]} %{node(f'mul %{diffusion[j]} %{z}')}")
        s = node(f"mul %{s} %{node(f'exp %{x}')}")
        total = node(f"add %{total} %{s}")
    mean = node(f"div %{total} %{node(f'const {float(n)}')}")
    payoff = node(f"max %{node(f'sub %{mean} %{strike}')} %{node('const 0.0')}")
    rt = node(f"mul %{rate} %{maturity}")
    discount = node(f"exp %{node(f'neg %{rt}')}")
    price = node(f"mul %{discount} %{payoff}")
    lines.append(f"output price = %{price}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
