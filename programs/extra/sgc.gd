# SGC (Wu et al., ICML'19): K parameter-free propagation steps, then one linear layer
graph G (self_loops, symmetric)
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

# no params, no transform: a pure propagation layer
layer Prop(h: [d]) -> [d] {
    scatter m = src.h * rsqrt(src.degree * dst.degree)
    gather  a = sum(m)
    return a
}

layer Linear[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param b : f32[dout] = zeros
    transform t = h @ W
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model SGC[K = 2] {
    h = X
    repeat K {
        h = Prop(h)
    }
    return Linear[C](h)
}

train cora {
    model     = SGC[K = 3]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.2, weight_decay = 5e-5)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
