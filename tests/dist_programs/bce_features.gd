# bce against the f32 input X (predict the binary bag-of-words): a [F] target.
# Was: the ranks took the labels (an internal error), then summed over F (F times the reference loss).
graph G (self_loops)
input X : vertex f32[F]
mask train, val, test

layer Enc[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m = src.h * rsqrt(dst.degree)
    gather a = sum(m)
    transform t = a @ W
    return t
}

layer Dec[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    apply o = t + b
    return o
}

model AE[hidden = 4] {
    z = tanh(Enc[hidden](X))
    return Dec[F](z)
}

train t {
    model = AE
    loss = bce(X, mask = train)
    optimizer = adam(lr = 0.01)
}
