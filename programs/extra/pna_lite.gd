# Several aggregators of one message, concatenated (a small PNA-like layer):
# sum, mean, max and min gathers, concat with the vertex's own features
graph G (symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer MultiAgg[dout](h: [din]) -> [dout] {
    param Wm : f32[din, dout] = glorot
    param W  : f32[5 * dout, dout] = glorot
    param b  : f32[dout] = zeros
    transform z = h @ Wm
    sync      zs = sum(z)
    scatter   m = src.zs
    gather    s1 = sum(m)
    gather    s2 = mean(m)
    gather    s3 = max(m)
    gather    s4 = min(m)
    apply     c = concat(tanh(s1), s2, s3, s4, zs)
    transform t = c @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model PNALite[hidden = 16, p = 0.5] {
    h = dropout(X, p)
    h = elu(MultiAgg[hidden](h))
    h = dropout(h, p)
    return MultiAgg[C](h)
}

train cora {
    model     = PNALite
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
