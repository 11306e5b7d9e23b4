# APPNP (Klicpera et al., ICLR'19): an MLP, then K steps of personalised
# PageRank propagation with teleport alpha back to the MLP output h0
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

layer PPR[alpha](h: [d], h0: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  agg = sum(m)
    apply   out = alpha * h0 + (1 - alpha) * agg
    return out
}

model APPNP[hidden = 64, K = 10, alpha = 0.1, p = 0.5] {
    h = dropout(X, p)
    h = relu(Linear[hidden](h))
    h = dropout(h, p)
    h0 = Linear[C](h)
    h = h0
    repeat K {
        h = PPR[alpha](h, h0)
    }
    return h
}

train cora {
    model     = APPNP[K = 5]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
