# repeat counts are static expressions; each unrolled call gets its own params
# (Prop_1 .. Prop_3); the parameter-free propagation layer has none.
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer Prop(h: [d]) -> [d] {
    scatter m = src.h / dst.degree
    gather  a = sum(m)
    return a
}

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    sync s = sum(t)
    return s
}

model SGC[K = 2] {
    h = X
    repeat K * 2 - 1 {
        h = Prop(h)
    }
    return Lin[C](h)
}

train t { model = SGC[K = 2]; loss = cross_entropy(Y, mask = train) }

# RUN: gdsl compile %s | filecheck %s

# CHECK: module attrs {graph={self_loops=true}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # Prop_1
# CHECK-NEXT:   %w_inv : edge f32[E] = edge_const[expr=1/dst_degree, stage=scatter]
# CHECK-NEXT:   %a : vertex f32[N, F] = aggregate[invariant=true, msg=mul, reduce=sum, stage=gather, to=dst] %X, %w_inv
# CHECK-NEXT:   # Prop_2
# CHECK-NEXT:   %a_1 : vertex f32[N, F] = aggregate[invariant=true, msg=mul, reduce=sum, stage=gather, to=dst] %a, %w_inv
# CHECK-NEXT:   # Prop_3
# CHECK-NEXT:   %a_2 : vertex f32[N, F] = aggregate[invariant=true, msg=mul, order=sparse_first, order_by=invariant, order_grad=dense_first, order_grad_by=undecided, order_memo=true, reduce=sum, stage=gather, to=dst] %a_1, %w_inv
# CHECK-NEXT:   # Lin_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=Lin_1.W]
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a_2, %W
# CHECK-NEXT:   %s : vertex f32[N, C] = sync[op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %s, %Y
# CHECK-NEXT:   return %s
# CHECK-NEXT: }
