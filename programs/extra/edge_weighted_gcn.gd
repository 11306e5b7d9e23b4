# GCN on a weighted graph: each message is scaled by the edge's weight w,
# normalised by the weighted in-degree (a gather over the edge input itself)
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
input w : edge f32
mask train, val, test

layer WGCNConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    gather    wdeg = sum(w)
    apply     inv = rsqrt(wdeg)
    scatter   m = src.h * src.inv * dst.inv * w
    gather    a = sum(m)
    transform t = a @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model WGCN[hidden = 16, p = 0.5] {
    h = dropout(X, p)
    h = relu(WGCNConv[hidden](h))
    h = dropout(h, p)
    return WGCNConv[C](h)
}

train weighted {
    model     = WGCN
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
