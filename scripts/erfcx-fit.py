#!/usr/bin/env python3
# The Chebyshev coefficients of erfcx(x) = erfc(x) exp(x^2) on the octaves of [0.5, 8) that
# compiler/src/llvm/math.rs (ERFCX_FITS) evaluates: interpolation at 64 Chebyshev nodes in 50-digit
# arithmetic (mpmath), cut where a coefficient falls below 1e-18 of the first. Prints the Rust table.
import mpmath as mp
mp.mp.dps = 50
def erfcx(x): return mp.erfc(x)*mp.exp(x*x)
out=[]
for (a,b) in [(0.5,1.0),(1.0,2.0),(2.0,4.0),(4.0,8.0)]:
    N=64
    f=[erfcx(mp.mpf(a+b)/2 + mp.mpf(b-a)/2*mp.cos(mp.pi*(k+mp.mpf(1)/2)/N)) for k in range(N)]
    c=[]
    for j in range(40):
        s=mp.fsum(f[k]*mp.cos(mp.pi*j*(k+mp.mpf(1)/2)/N) for k in range(N))*2/N
        c.append(s)
    c[0]/=2
    keep=[x for x in c]
    # cut where |c| < 1e-18*|c0|
    n=next(i for i,x in enumerate(c) if abs(x) < 1e-18*abs(c[0]))
    out.append((a,b,[repr(float(x)) for x in c[:n]]))
for a,b,c in out:
    print(a,b,len(c))
    print("    &[" + ", ".join(x for x in c) + "],")
