# Deep GCN with residual connections: h = h + relu(GCNConv(h))
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Linear[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}

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

model ResGCN[hidden = 32, layers = 3, p = 0.5] {
    h = relu(Linear[hidden](dropout(X, p)))
    repeat layers {
        h = h + relu(GCNConv[hidden](h))
        h = dropout(h, p)
    }
    return Linear[C](h)
}

train cora {
    model     = ResGCN
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
