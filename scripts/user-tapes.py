#!/usr/bin/env python3
"""Writes the text tape of a product as a user records it, not one of nablac's built-ins: the
shapes issue 26's first-hour test priced, which the CPU cost model is checked on beside the
benchmark tapes (scripts/fit-cost.py).

  barrier-basket  a call on the mean of two correlated assets, knocked out the first day the
                  mean closes at or above the barrier; N daily steps (default 252); 9 inputs:
                  spot1 spot2 vol1 vol2 rho strike barrier rate maturity
  autocallable    one asset, N daily steps (default 252), called at the first of Q equally spaced
                  observations (default 4) where spot/spot0 >= call_level, paying
                  1 + q * coupon; otherwise at maturity 1, less the put's loss 1 - S_T/S_0 when
                  the spot ever closed below ki_barrier * spot0; 7 inputs:
                  spot vol rate maturity coupon call_level ki_barrier

Knock-outs and calls are indicators (format 2's lt/ge) times the payoff: their pathwise
derivatives are 0, as TAPE-FORMAT.md says of comparisons.

usage: scripts/user-tapes.py PRODUCT [--steps N] [--observations Q] > TAPE.ntape
"""
import argparse


class Tape:
    def __init__(self, title):
        self.lines = ["nablatape 2", f"# {title} (scripts/user-tapes.py)."]
        self.k = 0
        self.consts = {}

    def node(self, text):
        self.lines.append(f"%{self.k} = {text}")
        self.k += 1
        return f"%{self.k - 1}"

    def const(self, x):
        if x not in self.consts:
            self.consts[x] = self.node(f"const {float(x)!r}")
        return self.consts[x]

    def __getattr__(self, op):
        # t.mul(a, b) writes `mul a b`; t.exp(a) writes `exp a`.
        return lambda *args: self.node(" ".join([op, *args]))

    def text(self):
        return "\n".join(self.lines) + "\n"


def barrier_basket(n):
    t = Tape(f"Up-and-out call on the mean of 2 correlated assets, {n} daily steps")
    s1, s2 = t.input("spot1", "100.0"), t.input("spot2", "100.0")
    v1, v2 = t.input("vol1", "0.2"), t.input("vol2", "0.3")
    rho = t.input("rho", "0.5")
    strike, barrier = t.input("strike", "100.0"), t.input("barrier", "150.0")
    rate, maturity = t.input("rate", "0.03"), t.input("maturity", "1.0")
    dt = t.div(maturity, t.const(n))
    sqrt_dt = t.sqrt(dt)
    half = t.const(0.5)
    drift = [t.mul(t.sub(rate, t.mul(half, t.mul(v, v))), dt) for v in (v1, v2)]
    diffusion = [t.mul(v, sqrt_dt) for v in (v1, v2)]
    rho_bar = t.sqrt(t.sub(t.const(1.0), t.mul(rho, rho)))
    alive, mean = t.const(1.0), None
    for i in range(n):
        z1, w = t.normal(str(2 * i)), t.normal(str(2 * i + 1))
        z2 = t.add(t.mul(rho, z1), t.mul(rho_bar, w))
        s1 = t.mul(s1, t.exp(t.add(drift[0], t.mul(diffusion[0], z1))))
        s2 = t.mul(s2, t.exp(t.add(drift[1], t.mul(diffusion[1], z2))))
        mean = t.mul(half, t.add(s1, s2))
        alive = t.mul(alive, t.lt(mean, barrier))
    payoff = t.mul(alive, t.max(t.sub(mean, strike), t.const(0.0)))
    t.lines.append(f"output price = {t.mul(t.exp(t.neg(t.mul(rate, maturity))), payoff)}")
    return t.text()


def autocallable(n, q):
    t = Tape(f"Autocallable, {n} daily steps, {q} call dates, knock-in put at maturity")
    spot, vol = t.input("spot", "100.0"), t.input("vol", "0.25")
    rate, maturity = t.input("rate", "0.03"), t.input("maturity", "1.0")
    coupon, call_level = t.input("coupon", "0.02"), t.input("call_level", "1.0")
    ki_barrier = t.input("ki_barrier", "0.7")
    dt = t.div(maturity, t.const(n))
    drift = t.mul(t.sub(rate, t.mul(t.const(0.5), t.mul(vol, vol))), dt)
    diffusion = t.mul(vol, t.sqrt(dt))
    one = t.const(1.0)
    s, low, alive, paid = spot, spot, one, t.const(0.0)
    for i in range(1, n + 1):
        s = t.mul(s, t.exp(t.add(drift, t.mul(diffusion, t.normal(str(i - 1))))))
        low = t.min(low, s)
        if (i * q) % n == 0:
            j = i * q // n
            called = t.mul(alive, t.ge(t.div(s, spot), call_level))
            amount = t.add(one, t.mul(t.const(j), coupon))
            df = t.exp(t.neg(t.mul(rate, t.mul(dt, t.const(i)))))
            paid = t.add(paid, t.mul(called, t.mul(amount, df)))
            alive = t.sub(alive, called)
    knocked_in = t.lt(t.div(low, spot), ki_barrier)
    loss = t.mul(knocked_in, t.max(t.sub(one, t.div(s, spot)), t.const(0.0)))
    redemption = t.mul(t.exp(t.neg(t.mul(rate, maturity))), t.sub(one, loss))
    t.lines.append(f"output price = {t.add(paid, t.mul(alive, redemption))}")
    return t.text()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("product", choices=["barrier-basket", "autocallable"])
    p.add_argument("--steps", type=int, default=252)
    p.add_argument("--observations", type=int, default=4)
    a = p.parse_args()
    if a.steps < 1:
        p.error("need --steps >= 1")
    if a.product == "barrier-basket":
        print(barrier_basket(a.steps), end="")
    else:
        if not (1 <= a.observations <= a.steps) or a.steps % a.observations:
            p.error("need 1 <= observations <= steps, observations dividing steps")
        print(autocallable(a.steps, a.observations), end="")


if __name__ == "__main__":
    main()
