# heads = dout = C = 7 here, yet s * src.zs ([heads] against [heads, dout]) aligns
# leading axes and a + b ([dout] bias) aligns trailing axes: the lowering
# decides on symbolic shapes and records the mode as an attribute.
graph G (self_loops)
input X : vertex f32[F]
input Y : vertex label[C]
mask train
layer L[dout, heads](h: [din]) -> [heads, dout] {
    param W : f32[din, heads, dout] = glorot
    param al : f32[heads, dout] = glorot
    param b : f32[dout] = zeros
    transform z = h @ W
    sync zs = sum(z)
    scatter s = dot(src.zs, al)
    scatter m = s * src.zs
    gather a = sum(m)
    apply out = a + b
    return out
}
model M { return mean(L[C, C](X), 0) }
train t { model = M; loss = cross_entropy(Y, mask = train) }

# RUN: gdsl compile %s --data cora | filecheck %s

# CHECK: module attrs {dims={C=7, F=1433, N=2708}, graph={self_loops=true}}
# CHECK: func @main() {
# CHECK-NEXT:   %X : vertex f32[N, 1433] = input[name=X]
# CHECK-NEXT:   %Y : vertex i64[N] = input[classes=7, name=Y]
# CHECK-NEXT:   # L_1
# CHECK-NEXT:   %W : param f32[1433, 7, 7] = param[init=glorot, name=L_1.W]
# CHECK-NEXT:   %al : param f32[7, 7] = param[init=glorot, name=L_1.al]
# CHECK-NEXT:   %b : param f32[7] = param[init=zeros, name=L_1.b]
# CHECK-NEXT:   %z : vertex f32[N, 7, 7] = matmul[partial=true, stage=transform] %X, %W
# CHECK-NEXT:   %zs : vertex f32[N, 7, 7] = sync[op=sum, stage=sync] %z
# CHECK-NEXT:   %s : vertex f32[N, 7] = dot[stage=scatter] %zs, %al
# CHECK-NEXT:   %m : vertex f32[N, 7, 7] = mul[broadcast=lead, stage=scatter] %s, %zs
# CHECK-NEXT:   %a : vertex f32[N, 7, 7] = aggregate[msg=copy_src, reduce=sum, stage=gather, to=dst] %m
# CHECK-NEXT:   %out : vertex f32[N, 7, 7] = add[broadcast=trail, stage=apply] %a, %b
# CHECK-NEXT:   %0 : vertex f32[N, 7] = reduce[axis=0, fn=mean] %out
# CHECK-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %0, %Y
# CHECK-NEXT:   return %0
# CHECK-NEXT: }
