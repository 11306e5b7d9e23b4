# dropout on messages (edge dropout), on a gather result and on a transform result.
# Was: partition = features drew the edge mask for its local edges, not all of layer 1's (internal error).
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer DConv[dout, p = 0.3](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    scatter m = dropout(src.h * rsqrt(src.degree * dst.degree), p)
    gather  a = sum(m)
    apply   ad = dropout(a, p)
    transform t = ad @ W
    sync s = sum(t)
    apply out = dropout(s, 0.1) + b
    return out
}

model M[hidden = 16] {
    h = relu(DConv[hidden](X))
    return DConv[C, 0.2](h)
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01)
}
