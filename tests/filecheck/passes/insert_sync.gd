# The transform result t is read by apply without a sync: insert-sync adds one
# and marks it inserted=true; the written sync in the second layer is kept.
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer NoSync[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    apply     out = relu(t)
    return out
}

layer WithSync[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    sync      s = sum(t)
    apply     out = s
    return out
}

model M {
    return WithSync[C](NoSync[8](X))
}

train t {
    model = M
    loss  = cross_entropy(Y, mask = train)
}

# RUN: gdsl compile %s --print-ir-after=insert-sync | filecheck %s

# CHECK: // ----- IR after insert-sync -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # NoSync_1
# CHECK-NEXT:   %W : param f32[F, 8] = param[init=glorot, name=NoSync_1.W]
# CHECK-NEXT:   %t : vertex f32[N, 8] = matmul[partial=true, stage=transform] %X, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, 8] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %out : vertex f32[N, 8] = relu[stage=apply] %t_sync
# CHECK-NEXT:   # WithSync_1
# CHECK-NEXT:   %W_1 : param f32[8, C] = param[init=glorot, name=WithSync_1.W]
# CHECK-NEXT:   %t_1 : vertex f32[N, C] = matmul[partial=true, stage=transform] %out, %W_1
# CHECK-NEXT:   %s : vertex f32[N, C] = sync[op=sum, stage=sync] %t_1
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %s, %Y
# CHECK-NEXT:   return %s
# CHECK-NEXT: }
