# A bias added inside layer 1's transform, before its sync: on P3's feature split each rank's partial
# sum would carry it, so the sync would sum it P times. Refused with that reason (was: "not
# column-separable (it mixes feature columns)", which a bias does not).
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer L1[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W + b
    sync      s = sum(t)
    scatter   m = src.s * rsqrt(src.degree * dst.degree)
    gather    a = sum(m)
    return a
}

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}

model M[hid = 16] {
    return Lin[C](relu(L1[hid](X)))
}

train t {
    model = M
    loss = cross_entropy(Y, mask = train)
    epochs = 20
}
