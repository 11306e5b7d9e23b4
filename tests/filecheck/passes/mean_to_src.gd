# mean over incoming edges becomes sum * 1/max(1, in-degree); over outgoing
# edges (to = src) it uses the out-degree. max is left alone.
graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer Agg(h: [d]) -> [d] {
    scatter m  = src.h
    gather  a  = mean(m)
    scatter m2 = dst.h
    gather  b  = mean(m2, to = src)
    gather  c  = max(m)
    apply   out = a + b + c
    return out
}

layer Lin[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    transform t = h @ W
    return t
}

model M { return Lin[C](Agg(X)) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

# RUN: gdsl compile %s --print-ir-after=canonicalize | filecheck %s

# CHECK: // ----- IR after canonicalize -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # Agg_1
# CHECK-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %X
# CHECK-NEXT:   %inv_degree : vertex f32[N] = vertex_const[expr=1/Max(1, degree), stage=gather]
# CHECK-NEXT:   %a_sum : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %a : vertex f32[N, F] = mul[stage=gather] %a_sum, %inv_degree
# CHECK-NEXT:   %m2 : edge f32[E, F] = dst[stage=scatter] %X
# CHECK-NEXT:   %inv_out_degree : vertex f32[N] = vertex_const[expr=1/Max(1, out_degree), stage=gather]
# CHECK-NEXT:   %b_sum : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=src] %m2
# CHECK-NEXT:   %b : vertex f32[N, F] = mul[stage=gather] %b_sum, %inv_out_degree
# CHECK-NEXT:   %c : vertex f32[N, F] = gather[reduce=max, stage=gather, to=dst] %m
# CHECK-NEXT:   %0 : vertex f32[N, F] = add[stage=apply] %a, %b
# CHECK-NEXT:   %out : vertex f32[N, F] = add[stage=apply] %0, %c
# CHECK-NEXT:   # Lin_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=Lin_1.W]
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %out, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
