# sage.gd shaped, hidden 128, 2 layers, full batch (bench)
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

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

model SAGE[hidden = 128, layers = 2, p = 0.5] {
    h = X
    repeat layers - 1 {
        h = dropout(relu(SAGEConv[hidden](h)), p)
    }
    return SAGEConv[C](h)
}

train bench {
    model     = SAGE[hidden = 128, layers = 2]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.003)
    epochs    = 10
}
