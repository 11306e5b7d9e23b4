"""Source generation for the Numba backend's dense kernels: a layer's
elementwise tail dropout(act(x + bias)) in one pass (DistGNN-MB's fused
UPDATE epilogue, drawing the reference backend's dropout masks) and the
per-head dot products of a vertex tensor with parameters (GAT's attention
scores).  The graph kernels, the cache and the loading are in codegen.py,
which generates these texts through gen_epilogue / gen_head_dot."""
from __future__ import annotations

from gdsl.backends.numba.codegen import _DECOR, _DECOR_REASSOC, _ind


def gen_head_dot() -> tuple[str, str]:
    """out[k, n, h] = <z[n, h, :], a[k, h, :]> for K parameter tensors a[k]
    (GAT's attention scores el, er: one pass over z for both), and the
    backward: dz[n, h, :] = sum_k g[k, n, h] a[k, h, :], da[k] summed over
    the rows of each chunk into dap[c, k] (the caller adds the chunks)."""
    fwd = [_DECOR_REASSOC,
           "def head_dot_fwd(chunks, z, a, out, zero):",
           '    """z [N, H, D], a [K, H, D], out [K, N, H]."""',
           "    K = a.shape[0]",
           "    H = z.shape[1]",
           "    D = z.shape[2]",
           "    for c in prange(chunks.shape[0] - 1):",
           "        for n in range(chunks[c], chunks[c + 1]):",
           "            zn = z[n]",
           "            for k in range(K):",
           "                ak = a[k]",
           "                ok = out[k, n]",
           "                for h in range(H):",
           "                    acc = zero",
           "                    for i in range(D):",
           "                        acc += zn[h, i] * ak[h, i]",
           "                    ok[h] = acc"]
    bwd = [_DECOR_REASSOC,
           "def head_dot_bwd(chunks, z, a, g, dz, dap, zero, need_z, need_a):",
           '    """g [K, N, H]; dz [N, H, D]; dap [chunks, K, H, D]."""',
           "    K = a.shape[0]",
           "    H = z.shape[1]",
           "    D = z.shape[2]",
           "    for c in prange(chunks.shape[0] - 1):",
           "        if need_a:",
           "            acc = dap[c]",
           "            for k in range(K):",
           "                for h in range(H):",
           "                    for i in range(D):",
           "                        acc[k, h, i] = zero",
           "        for n in range(chunks[c], chunks[c + 1]):",
           "            zn = z[n]",
           "            if need_z:",
           "                dn = dz[n]",
           "                for h in range(H):",
           "                    for i in range(D):",
           "                        dn[h, i] = zero",
           "            for k in range(K):",
           "                ak = a[k]",
           "                gk = g[k, n]",
           "                for h in range(H):",
           "                    gh = gk[h]",
           "                    if need_z:",
           "                        for i in range(D):",
           "                            dn[h, i] += gh * ak[h, i]",
           "                    if need_a:",
           "                        for i in range(D):",
           "                            acc[k, h, i] += gh * zn[h, i]"]
    return "head_dot", "\n".join(fwd) + "\n\n\n" + "\n".join(bwd) + "\n"


ACTS = ("none", "relu", "elu")


# expm1(t) for t <= 0 without a libm call (so that the loop vectorises):
# t / 32 in [-0.94, 0] (t clamped at -30, where float32 expm1 is -1), a
# degree-13 Taylor polynomial there (remainder < 5e-12 relative), then five
# doublings expm1(2s) = expm1(s) (expm1(s) + 2), each keeping the relative
# accuracy; in float64: about 1e-10 relative, far below float32's 6e-8.
_EXPM1_NEG = ["s = max(np.float64(v), -30.0) * 0.03125",
              ("e = s * (1.0 + s * (0.5 + s * (1.0 / 6 + s * (1.0 / 24 + s * (1.0 / 120 + s * (1.0 / 720"
               " + s * (1.0 / 5040 + s * (1.0 / 40320 + s * (1.0 / 362880 + s * (1.0 / 3628800"
               " + s * (1.0 / 39916800 + s * (1.0 / 479001600 + s * (1.0 / 6227020800)))))))))))))"),
              "e = e * (e + 2.0)", "e = e * (e + 2.0)", "e = e * (e + 2.0)", "e = e * (e + 2.0)",
              "e = e * (e + 2.0)"]


def _act_lines(act: str) -> list[str]:
    if act == "relu":
        return ["if v < zero:", "    v = zero"]   # relu(nan) = nan, as torch's
    if act == "elu":
        return [*_EXPM1_NEG, "if not v > zero:", "    v = v * zero + e"]  # v * 0: the data dtype
    return []


def gen_epilogue(act: str, bias: bool, drop: bool) -> tuple[str, str]:
    """The elementwise tail of a layer, y = dropout(act(x + bias)), in one
    pass (DistGNN-MB's fused UPDATE epilogue), and its backward.

    The dropout is the reference backend's: keep = u >= p with u the float32
    uniforms torch.rand draws from an mt19937 generator (one 32-bit output
    per element, in element order, 24 bits used) and y = (v * keep) / (1 - p);
    the kernel continues the stream from the generator state handed in
    (buf[:624], pos), so its masks are bit-identical to the reference's.
    Generating the stream is serial (the mt19937 recurrence, vectorised in
    runs of 227 words), so is the dropout pass: measured 0.7-2.6 ns per
    element on one core against 15-20 ns for torch's rand, compare, mul and
    div; a prange over the rows of each stream segment was no faster on 2
    cores and, one parallel region per segment, far slower whenever another
    process held one of the cores.  Without dropout the pass is parallel."""
    if act not in ACTS:
        raise ValueError(f"unknown activation {act!r} (one of {ACTS})")
    tag = f"{act}_{'b' if bias else 'nob'}_{'d' if drop else 'nod'}"
    name = f"epilogue_{tag}"
    vx = "v = xr[k] + bias[k]" if bias else "v = xr[k]"
    twist = ["@njit(cache=True)",
             "def mt_twist(buf, start, n):",
             '    """buf[k + 624] = buf[k + 397] ^ twist(buf[k], buf[k + 1]) for k in [start, start + n):',
             "    the mt19937 state recurrence on a flat word buffer (unsigned indices:",
             '    no wrap-around checks, so LLVM vectorises the runs of 227 independent words)."""',
             "    for k in range(np.uint64(start), np.uint64(start + n)):",
             "        y = (buf[k] & np.uint32(0x80000000)) | (buf[k + np.uint64(1)] & np.uint32(0x7fffffff))",
             "        buf[k + np.uint64(624)] = (buf[k + np.uint64(397)] ^ (y >> np.uint32(1))",
             "                                   ^ ((buf[k + np.uint64(1)] & np.uint32(1)) * np.uint32(0x9908b0df)))"]
    elem = [vx, *_act_lines(act)]
    if drop:
        fwd = ["@njit(cache=True, fastmath=False)",
               "def epi_fwd(x, bias, out, mask, buf, pos, seg, p32, q, one, zero):",
               f'    """out = dropout({act}(x{" + bias" if bias else ""})), mask[r, k] = 1 where kept;',
               "    x, out, mask: [R, F]; buf[:624] the generator state, pos its next word;",
               "    keep = float32 uniform >= p32; out = (v * keep) / q with q = 1 - p;",
               '    returns the new pos (buf[:624] then holds the new state)."""',
               "    R = x.shape[0]",
               "    F = x.shape[1]",
               "    hi = 624",
               "    r0 = 0",
               "    while r0 < R:",
               "        r1 = min(R, r0 + seg)",
               "        need = pos + (r1 - r0) * F",
               "        if need > hi:",
               "            g = ((need - hi + 623) // 624) * 624",
               "            mt_twist(buf, hi - 624, g)",
               "            hi += g",
               "        for r in range(r0, r1):",
               "            wb = pos + (r - r0) * F",
               "            wr = buf[wb:wb + F]",
               "            xr = x[r]",
               "            orow = out[r]",
               "            mr = mask[r]",
               "            for k in range(F):",
               "                a = wr[k]",
               "                a ^= a >> np.uint32(11)",
               "                a ^= (a << np.uint32(7)) & np.uint32(0x9d2c5680)",
               "                a ^= (a << np.uint32(15)) & np.uint32(0xefc60000)",
               "                a ^= a >> np.uint32(18)",
               "                u = np.float32(a & np.uint32(0xFFFFFF)) * np.float32(5.9604644775390625e-08)",
               *_ind(elem, 16),
               "                keep = u >= p32",
               "                orow[k] = (v * (one if keep else zero)) / q",
               "                mr[k] = keep",
               "        pos = need",
               "        if hi > 624:",
               "            sh = hi - 624",
               "            for t in range(624):",
               "                buf[t] = buf[sh + t]",
               "            pos -= sh",
               "            hi = 624",
               "        r0 = r1",
               "    return pos"]
    else:
        fwd = [_DECOR,
               "def epi_fwd(x, bias, out, mask, buf, pos, seg, p32, q, one, zero):",
               f'    """out = {act}(x{" + bias" if bias else ""}) (no dropout); x, out: [R, F]."""',
               "    F = x.shape[1]",
               "    for r in prange(x.shape[0]):",
               "        xr = x[r]",
               "        orow = out[r]",
               "        for k in range(F):",
               *_ind(elem, 12),
               "            orow[k] = v",
               "    return pos"]
    # the reference's backward, op by op: (g / q) * keep, then the activation's
    grad = ["t = (gr[k] / q) * (one if mr[k] else zero)"] if drop else ["t = gr[k]"]
    if act == "relu":
        grad += [vx, "if not v > zero:", "    t = zero"]
    elif act == "elu":
        grad += [vx, *_EXPM1_NEG, "if not v > zero:", "    t = t * (e + 1.0)"]
    bwd = [_DECOR,
           "def epi_bwd(g, x, bias, mask, dx, dbp, chunks, q, one, zero):",
           '    """dx = d out / d x * g; dbp[c] = the sum of dx over the rows of chunk c (the bias',
           '    gradient, summed by the caller)."""',
           "    F = g.shape[1]",
           "    for c in prange(chunks.shape[0] - 1):",
           *(["        acc = dbp[c]", "        for k in range(F):", "            acc[k] = zero"] if bias else []),
           "        for r in range(chunks[c], chunks[c + 1]):",
           "            gr = g[r]",
           "            dr = dx[r]",
           *(["            xr = x[r]"] if act != "none" else []),
           *(["            mr = mask[r]"] if drop else []),
           "            for k in range(F):",
           *_ind(grad, 16),
           "                dr[k] = t",
           *(["                acc[k] += t"] if bias else [])]
    body = "\n".join(fwd) + "\n\n\n" + "\n".join(bwd) + "\n"
    if drop:
        body = "\n".join(twist) + "\n\n\n" + body
    return name, body
