# DAGNN (Liu et al., KDD'20): MLP, K = 4 parameter-free hops, adaptive hop weights
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Linear[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    apply     out = t + b
    return out
}

layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

layer Adapt(h0: [d], h1: [d], h2: [d], h3: [d], h4: [d]) -> [d] {
    param s : f32[d] = glorot
    apply s0 = sigmoid(dot(h0, s))
    apply s1 = sigmoid(dot(h1, s))
    apply s2 = sigmoid(dot(h2, s))
    apply s3 = sigmoid(dot(h3, s))
    apply s4 = sigmoid(dot(h4, s))
    apply out = s0 * h0 + s1 * h1 + s2 * h2 + s3 * h3 + s4 * h4
    return out
}

model DAGNN[hidden = 64, p = 0.5] {
    h = dropout(X, p)
    h = relu(Linear[hidden](h))
    h = dropout(h, p)
    h0 = Linear[C](h)
    h1 = Prop(h0)
    h2 = Prop(h1)
    h3 = Prop(h2)
    h4 = Prop(h3)
    return Adapt(h0, h1, h2, h3, h4)
}

train cora {
    model     = DAGNN
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 200
    eval      = accuracy(mask = val), accuracy(mask = test)
}
