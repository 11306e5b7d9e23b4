# gcn.gd's GCN with `order GCNConv#2 = sparse_first` and no backward option:
# the order pass's cost then picks a backward order other than autograd's own
# (sparse_first, 16 -> C shrinks), which 1.5D and redistribute(R_A < P) cannot
# run; they fall back to autograd's (was: every rank refused it).
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

model GCN[hidden = 16, p = 0.5] {
    h = dropout(X, p)
    h = relu(GCNConv[hidden](h))
    h = dropout(h, p)
    return GCNConv[C](h)
}

train cora {
    model     = GCN[hidden = 16]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 200
    eval      = accuracy(mask = val), accuracy(mask = test)
}

schedule {
    order GCNConv#2 = sparse_first
}
