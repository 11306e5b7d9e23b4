graph G
input X : vertex f32[F]
input Y : vertex label[C]
mask train

layer Bad[dout](h: [din]) -> [dout] {
    param W : f32[dout, din] = glorot
    scatter m = h * 2
    gather  a = sum(m)
    transform t = a @ W
    return t
}

model M { return Bad[C](X) }

train t { model = M; loss = cross_entropy(Y, mask = train) }

# RUN: not gdsl compile %s 2>&1 | filecheck %s

# CHECK: {{.*}}:8:17: error: scatter cannot read vertex tensor 'h' directly; write src.h or dst.h
# CHECK-NEXT:    8 |     scatter m = h * 2
# CHECK-NEXT:      |                 ^
