# GCNII (Chen et al., ICML'20): initial residual (alpha) and identity mapping (beta),
# 8 layers. beta_l = log(lambda / l + 1) with lambda = 0.5 depends on the layer index,
# which `repeat` has not, so the layers are unrolled by hand with their betas.
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

layer GCNIIConv[alpha, beta](h: [d], h0: [d]) -> [d] {
    param W : f32[d, d] = glorot
    scatter   m = src.h * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    apply     s = (1 - alpha) * a + alpha * h0
    transform t = s @ W
    apply     out = (1 - beta) * s + beta * t
    return out
}

model GCNII[hidden = 64, alpha = 0.1, p = 0.6] {
    h = dropout(X, p)
    h0 = relu(Linear[hidden](h))
    h = h0
    h = relu(GCNIIConv[alpha, 0.4055](dropout(h, p), h0))   # beta_1 = log(lambda / 1 + 1)
    h = relu(GCNIIConv[alpha, 0.2231](dropout(h, p), h0))   # beta_2 = log(lambda / 2 + 1)
    h = relu(GCNIIConv[alpha, 0.1542](dropout(h, p), h0))   # beta_3 = log(lambda / 3 + 1)
    h = relu(GCNIIConv[alpha, 0.1178](dropout(h, p), h0))   # beta_4 = log(lambda / 4 + 1)
    h = relu(GCNIIConv[alpha, 0.0953](dropout(h, p), h0))   # beta_5 = log(lambda / 5 + 1)
    h = relu(GCNIIConv[alpha, 0.0800](dropout(h, p), h0))   # beta_6 = log(lambda / 6 + 1)
    h = relu(GCNIIConv[alpha, 0.0690](dropout(h, p), h0))   # beta_7 = log(lambda / 7 + 1)
    h = relu(GCNIIConv[alpha, 0.0606](dropout(h, p), h0))   # beta_8 = log(lambda / 8 + 1)
    h = dropout(h, p)
    return Linear[C](h)
}

train cora {
    model     = GCNII
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 200
    eval      = accuracy(mask = val), accuracy(mask = test)
}
