graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer L[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    scatter m = src.h
    gather a = sum(m)
    transform t = a @ W
    return t
}

model M { return L[C](X) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

# RUN: gdsl compile %s --print-ir-after-all | filecheck %s

# CHECK: // ----- IR after lower -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @L_0(%h : vertex f32[N, F]) attrs {layer=L, static={dout=C}} {
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=W]
# CHECK-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %h
# CHECK-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   return %t
# CHECK-NEXT: }
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %0 : vertex f32[N, C] = call[callee=L_0, layer=L, static={dout=C}] %X
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %0, %Y
# CHECK-NEXT:   return %0
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after inline -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %X
# CHECK-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t, %Y
# CHECK-NEXT:   return %t
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after insert-sync -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %X
# CHECK-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after canonicalize -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %X
# CHECK-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after fold-edge-constants -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %X
# CHECK-NEXT:   %a : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after fuse -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %a : vertex f32[N, F] = aggregate[msg=copy_src, reduce=sum, stage=gather, to=dst] %X
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after order -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %a : vertex f32[N, F] = aggregate[msg=copy_src, order=sparse_first, order_by=invariant, order_grad=dense_first, order_grad_by=undecided, order_memo=true, reduce=sum, stage=gather, to=dst] %X
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after mark-invariant -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %a : vertex f32[N, F] = aggregate[invariant=true, msg=copy_src, order=sparse_first, order_by=invariant, order_grad=dense_first, order_grad_by=undecided, order_memo=true, reduce=sum, stage=gather, to=dst] %X
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
# CHECK-NEXT: // ----- IR after partition -----
# CHECK-NEXT: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %a : vertex f32[N, F] = aggregate[invariant=true, msg=copy_src, order=sparse_first, order_by=invariant, order_grad=dense_first, order_grad_by=undecided, order_memo=true, reduce=sum, stage=gather, to=dst] %X
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %a, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
