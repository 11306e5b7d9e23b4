# Graph-only edge expressions fold into one edge_const, including an edge
# input; an expression that reads a learned value does not fold.
graph G
input X : vertex f32[F]
input w : edge f32
input Y : vertex label[C]
mask train

layer WConv[dout](h: [din]) -> [dout] {
    param W : f32[din, dout] = glorot
    param g : f32[din] = ones
    scatter m = src.h * (2 * w / sqrt(dst.degree + 1))
    scatter n = src.h * g
    gather  a = sum(m)
    gather  b = sum(n)
    transform t = (a + b) @ W
    return t
}

model M { return WConv[C](X) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

# RUN: gdsl compile %s | filecheck %s

# CHECK: module attrs {graph={}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, F] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# CHECK-NEXT:   # WConv_1
# CHECK-NEXT:   %W : param f32[F, C] = param[init=glorot, name=WConv_1.W]
# CHECK-NEXT:   %g : param f32[F] = param[init=ones, name=WConv_1.g]
# CHECK-NEXT:   %w : edge f32[E] = edge_const[expr=2*w/sqrt(dst_degree + 1), stage=scatter]
# CHECK-NEXT:   %n : vertex f32[N, F] = mul[stage=scatter] %X, %g
# CHECK-NEXT:   %a : vertex f32[N, F] = aggregate[invariant=true, msg=mul, reduce=sum, stage=gather, to=dst] %X, %w
# CHECK-NEXT:   %b : vertex f32[N, F] = aggregate[msg=copy_src, reduce=sum, stage=gather, to=dst] %n
# CHECK-NEXT:   %0 : vertex f32[N, F] = add[stage=transform] %a, %b
# CHECK-NEXT:   %t : vertex f32[N, C] = matmul[partial=true, stage=transform] %0, %W
# CHECK-NEXT:   %t_sync : vertex f32[N, C] = sync[inserted=true, op=sum, stage=sync] %t
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %t_sync, %Y
# CHECK-NEXT:   return %t_sync
# CHECK-NEXT: }
