# GCN written without sync statements: the compiler inserts them
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
    apply     out = t + b
    return out
}

model GCN[hidden = 16, p = 0.5] {
    h = dropout(X, p)
    h = relu(GCNConv[hidden](h))
    h = dropout(h, p)
    return GCNConv[C](h)
}

train cora {
    model     = GCN
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
