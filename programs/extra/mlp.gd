# A graph-free MLP: layers with transform/apply only (no scatter, no gather),
# no sync written (the compiler inserts it), log_softmax output with the nll loss
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer Dense[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = uniform(0.05)
    param b : f32[dout] = normal(0.01)
    transform t = h @ W
    apply     out = t + b
    return out
}

model MLP[hidden = 64, p = 0.5] {
    h = dropout(X, p)
    h = tanh(Dense[hidden](h)); h = dropout(h, p)
    return log_softmax(Dense[C](h))
}

train cora {
    model     = MLP
    loss      = nll(Y, mask = train)
    optimizer = adamw(lr = 0.01, weight_decay = 1e-3)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
