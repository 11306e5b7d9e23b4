# A GCN with vertex-wise gates and a feature-attention readout; exercises
# dot, sigmoid, softmax, reshape, mean(x, axis), sum(x, axis), concat, elu
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer GatedConv[dout, k = 2](h: [din]) -> [dout] {
    param W  : f32[din, k * dout] = glorot
    param g  : f32[din] = normal(0.1)
    param ws : f32[dout] = ones
    param b  : f32[dout] = zeros
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    apply     gate = sigmoid(dot(h, g))
    apply     x = gate * a + (1 - gate) * h
    transform t = x @ W
    sync      s = sum(t)
    apply     r = reshape(s, [k, dout])
    apply     att = softmax(dot(r, ws))
    apply     out = sum(att * r, 0) + mean(r, 0) + b
    return out
}

model Gated[hidden = 16, p = 0.5] {
    h = dropout(X, p)
    h = elu(GatedConv[hidden](h))
    h = concat(h, tanh(h))
    h = dropout(h, p)
    return GatedConv[C, k = 3](h)
}

train cora {
    model     = Gated
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
