# Two identical GCNConv calls on X, then a dropout (helper-65): a hoisting compile shares one
# sparse-first A X, others run two dense-first layers, so the ops before the dropout differ in number;
# the mask must still be the one `gdsl run` draws (compiler.mask_keys).
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer GCNConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    transform t = a @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}
model M[p = 0.5] {
    a = GCNConv[C](X) + GCNConv[C](X)
    return dropout(a, p)
}
train t {
    model     = M
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.05)
    epochs    = 20
}
