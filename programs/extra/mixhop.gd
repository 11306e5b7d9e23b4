# MixHop (Abu-El-Haija et al., ICML'19): concat of A^0 X W0, A X W1, A^2 X W2
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

layer MixHop[d](h: [din]) -> [3 * d] {
    param W0 : f32[din, d] = glorot
    param W1 : f32[din, d] = glorot
    param W2 : f32[din, d] = glorot
    scatter m1 = src.h * rsqrt(src.degree * dst.degree)
    gather  a1 = sum(m1)
    scatter m2 = src.a1 * rsqrt(src.degree * dst.degree)
    gather  a2 = sum(m2)
    apply   out = concat(h @ W0, a1 @ W1, a2 @ W2)
    return out
}

model MixHopNet[hidden = 20, p = 0.5] {
    h = dropout(X, p)
    h = relu(MixHop[hidden](h))
    h = dropout(h, p)
    h = relu(MixHop[hidden](h))
    return Linear[C](dropout(h, p))
}

train cora {
    model     = MixHopNet
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 200
    eval      = accuracy(mask = val), accuracy(mask = test)
}
