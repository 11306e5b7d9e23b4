# Direction-aware SAGE: mean over in-neighbours and, with gather (to = src),
# mean over out-neighbours, each with its own weight
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train, val, test

layer DirSAGEConv[dout](h: [din]) -> [dout] {
    param Ws  : f32[din, dout] = glorot
    param Win : f32[din, dout] = glorot
    param Wout: f32[din, dout] = glorot
    param b   : f32[dout] = zeros
    scatter   mi = src.h
    gather    ai = mean(mi)
    scatter   mo = dst.h
    gather    ao = mean(mo, to = src)
    transform t = h @ Ws + ai @ Win + ao @ Wout
    sync      s = sum(t)
    apply     out = s + b
    return out
}

model DirSAGE[hidden = 32, p = 0.5] {
    h = dropout(X, p)
    h = relu(DirSAGEConv[hidden](h))
    h = dropout(h, p)
    return DirSAGEConv[C](h)
}

train cora {
    model     = DirSAGE[hidden = 16]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.01, weight_decay = 5e-4)
    epochs    = 100
    eval      = accuracy(mask = val), accuracy(mask = test)
}
