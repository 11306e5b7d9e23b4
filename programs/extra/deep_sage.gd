# Deep GraphSAGE (mean) unrolled with repeat, trained with SGD + momentum
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer SAGEConv[dout](h: [din]) -> [dout] {
    param Ws : f32[din, dout] = glorot
    param Wn : f32[din, dout] = glorot
    param b  : f32[dout] = zeros
    scatter   m = src.h
    gather    a = mean(m)
    transform t = h @ Ws + a @ Wn
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model DeepSAGE[hidden = 32, layers = 4, p = 0.2] {
    h = X
    repeat layers - 1 {
        h = dropout(relu(SAGEConv[hidden](h)), p)
    }
    return SAGEConv[C](h)
}

train cora {
    model     = DeepSAGE[hidden = 16, layers = 4]
    loss      = cross_entropy(Y, mask = train)
    optimizer = sgd(lr = 0.05, momentum = 0.9)
    epochs    = 50
    eval      = accuracy(mask = val), accuracy(mask = test)
}
