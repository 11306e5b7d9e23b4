# gcn.gd shaped, hidden 128 (bench): two GCNConv layers, dropout 0.5
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

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

model GCN[hidden = 128, p = 0.5] {
    h = dropout(X, p)
    h = relu(GCNConv[hidden](h))
    h = dropout(h, p)
    return GCNConv[C](h)
}

train bench {
    model     = GCN[hidden = 128]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 10
}
