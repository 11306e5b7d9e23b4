# GraphSAGE with mean aggregation (Hamilton et al., NeurIPS'17), as in P3 Listing 1
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

model SAGE[hidden = 256, layers = 2, p = 0.5] {
    h = X
    repeat layers - 1 {
        h = dropout(relu(SAGEConv[hidden](h)), p)
    }
    return SAGEConv[C](h)
}

train products {
    model     = SAGE[hidden = 256, layers = 3]
    loss      = cross_entropy(Y, mask = train)
    optimizer = adam(lr = 0.003)
    epochs    = 20
    eval      = accuracy(mask = val), accuracy(mask = test)
    batch_size = 1000
    fanout     = [15, 10, 5]
}

# RUN: gdsl compile %s --emit ast | filecheck %s --check-prefix=AST
# RUN: gdsl compile %s --emit ir | filecheck %s --check-prefix=LOWER
# RUN: gdsl compile %s --emit ir-opt | filecheck %s --check-prefix=OPT

# AST: Program {{.*}}
# AST-NEXT:   Graph G
# AST-NEXT:   Input X : vertex f32[F]
# AST-NEXT:   Input Y : vertex label[C]
# AST-NEXT:   Mask train, val, test
# AST-NEXT:   Layer SAGEConv[dout](h: [din]) -> [dout]
# AST-NEXT:     Param Ws : f32[din, dout] = glorot
# AST-NEXT:     Param Wn : f32[din, dout] = glorot
# AST-NEXT:     Param b : f32[dout] = zeros
# AST-NEXT:     Stage scatter m = src.h
# AST-NEXT:     Stage gather a = mean(m)
# AST-NEXT:     Stage transform t = ((h @ Ws) + (a @ Wn))
# AST-NEXT:     Stage sync s = sum(t)
# AST-NEXT:     Stage apply out = (s + b)
# AST-NEXT:     Return out
# AST-NEXT:   Model SAGE[hidden = 256, layers = 2, p = 0.5]
# AST-NEXT:     Assign h = X
# AST-NEXT:     Repeat (layers - 1)
# AST-NEXT:       Assign h = dropout(relu(SAGEConv[hidden](h)), p)
# AST-NEXT:     Return SAGEConv[C](h)
# AST-NEXT:   Train products
# AST-NEXT:     Assign model = SAGE[hidden = 256, layers = 3]
# AST-NEXT:     Assign loss = cross_entropy(Y, mask = train)
# AST-NEXT:     Assign optimizer = adam(lr = 0.003)
# AST-NEXT:     Assign epochs = 20
# AST-NEXT:     Assign eval = accuracy(mask = val), accuracy(mask = test)
# AST-NEXT:     Assign batch_size = 1000
# AST-NEXT:     Assign fanout = [15, 10, 5]

# LOWER: module attrs {graph={}}
# LOWER: func @SAGEConv_0(%h : vertex f32[N, F]) attrs {layer=SAGEConv, static={dout=256}} {
# LOWER-NEXT:   %Ws : param f32[F, 256] = param[init=glorot, name=Ws]
# LOWER-NEXT:   %Wn : param f32[F, 256] = param[init=glorot, name=Wn]
# LOWER-NEXT:   %b : param f32[256] = param[init=zeros, name=b]
# LOWER-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %h
# LOWER-NEXT:   %a : vertex f32[N, F] = gather[reduce=mean, stage=gather, to=dst] %m
# LOWER-NEXT:   %0 : vertex f32[N, 256] = matmul[stage=transform] %h, %Ws
# LOWER-NEXT:   %1 : vertex f32[N, 256] = matmul[stage=transform] %a, %Wn
# LOWER-NEXT:   %t : vertex f32[N, 256] = add[partial=true, stage=transform] %0, %1
# LOWER-NEXT:   %s : vertex f32[N, 256] = sync[op=sum, stage=sync] %t
# LOWER-NEXT:   %out : vertex f32[N, 256] = add[stage=apply] %s, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @SAGEConv_1(%h : vertex f32[N, 256]) attrs {layer=SAGEConv, static={dout=256}} {
# LOWER-NEXT:   %Ws : param f32[256, 256] = param[init=glorot, name=Ws]
# LOWER-NEXT:   %Wn : param f32[256, 256] = param[init=glorot, name=Wn]
# LOWER-NEXT:   %b : param f32[256] = param[init=zeros, name=b]
# LOWER-NEXT:   %m : edge f32[E, 256] = src[stage=scatter] %h
# LOWER-NEXT:   %a : vertex f32[N, 256] = gather[reduce=mean, stage=gather, to=dst] %m
# LOWER-NEXT:   %0 : vertex f32[N, 256] = matmul[stage=transform] %h, %Ws
# LOWER-NEXT:   %1 : vertex f32[N, 256] = matmul[stage=transform] %a, %Wn
# LOWER-NEXT:   %t : vertex f32[N, 256] = add[partial=true, stage=transform] %0, %1
# LOWER-NEXT:   %s : vertex f32[N, 256] = sync[op=sum, stage=sync] %t
# LOWER-NEXT:   %out : vertex f32[N, 256] = add[stage=apply] %s, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @SAGEConv_2(%h : vertex f32[N, 256]) attrs {layer=SAGEConv, static={dout=C}} {
# LOWER-NEXT:   %Ws : param f32[256, C] = param[init=glorot, name=Ws]
# LOWER-NEXT:   %Wn : param f32[256, C] = param[init=glorot, name=Wn]
# LOWER-NEXT:   %b : param f32[C] = param[init=zeros, name=b]
# LOWER-NEXT:   %m : edge f32[E, 256] = src[stage=scatter] %h
# LOWER-NEXT:   %a : vertex f32[N, 256] = gather[reduce=mean, stage=gather, to=dst] %m
# LOWER-NEXT:   %0 : vertex f32[N, C] = matmul[stage=transform] %h, %Ws
# LOWER-NEXT:   %1 : vertex f32[N, C] = matmul[stage=transform] %a, %Wn
# LOWER-NEXT:   %t : vertex f32[N, C] = add[partial=true, stage=transform] %0, %1
# LOWER-NEXT:   %s : vertex f32[N, C] = sync[op=sum, stage=sync] %t
# LOWER-NEXT:   %out : vertex f32[N, C] = add[stage=apply] %s, %b
# LOWER-NEXT:   return %out
# LOWER-NEXT: }
# LOWER: func @main() {
# LOWER-NEXT:   %X : vertex f32[N, F] = input[name=X]
# LOWER-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# LOWER-NEXT:   # SAGEConv_1
# LOWER-NEXT:   %0 : vertex f32[N, 256] = call[callee=SAGEConv_0, layer=SAGEConv, static={dout=256}] %X
# LOWER-NEXT:   %1 : vertex f32[N, 256] = relu %0
# LOWER-NEXT:   %h : vertex f32[N, 256] = dropout[p=0.5] %1
# LOWER-NEXT:   # SAGEConv_2
# LOWER-NEXT:   %2 : vertex f32[N, 256] = call[callee=SAGEConv_1, layer=SAGEConv, static={dout=256}] %h
# LOWER-NEXT:   %3 : vertex f32[N, 256] = relu %2
# LOWER-NEXT:   %h_1 : vertex f32[N, 256] = dropout[p=0.5] %3
# LOWER-NEXT:   # SAGEConv_3
# LOWER-NEXT:   %4 : vertex f32[N, C] = call[callee=SAGEConv_2, layer=SAGEConv, static={dout=C}] %h_1
# LOWER-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %4, %Y
# LOWER-NEXT:   return %4
# LOWER-NEXT: }

# OPT: module attrs {graph={}}
# OPT: func @main() {
# OPT-NEXT:   %X : vertex f32[N, F] = input[name=X]
# OPT-NEXT:   %Y : vertex i64[N] = input[classes=C, name=Y]
# OPT-NEXT:   # SAGEConv_1
# OPT-NEXT:   %Ws : param f32[F, 256] = param[init=glorot, name=SAGEConv_1.Ws]
# OPT-NEXT:   %Wn : param f32[F, 256] = param[init=glorot, name=SAGEConv_1.Wn]
# OPT-NEXT:   %b : param f32[256] = param[init=zeros, name=SAGEConv_1.b]
# OPT-NEXT:   %m : edge f32[E, F] = src[stage=scatter] %X
# OPT-NEXT:   %inv_degree : vertex f32[N] = vertex_const[expr=1/Max(1, degree), stage=gather]
# OPT-NEXT:   %a_sum : vertex f32[N, F] = gather[reduce=sum, stage=gather, to=dst] %m
# OPT-NEXT:   %a : vertex f32[N, F] = mul[stage=gather] %a_sum, %inv_degree
# OPT-NEXT:   %0 : vertex f32[N, 256] = matmul[stage=transform] %X, %Ws
# OPT-NEXT:   %1 : vertex f32[N, 256] = matmul[stage=transform] %a, %Wn
# OPT-NEXT:   %t : vertex f32[N, 256] = add[partial=true, stage=transform] %0, %1
# OPT-NEXT:   %s : vertex f32[N, 256] = sync[op=sum, stage=sync] %t
# OPT-NEXT:   %out : vertex f32[N, 256] = add[stage=apply] %s, %b
# OPT-NEXT:   %2 : vertex f32[N, 256] = relu %out
# OPT-NEXT:   %h : vertex f32[N, 256] = dropout[p=0.5] %2
# OPT-NEXT:   # SAGEConv_2
# OPT-NEXT:   %Ws_1 : param f32[256, 256] = param[init=glorot, name=SAGEConv_2.Ws]
# OPT-NEXT:   %Wn_1 : param f32[256, 256] = param[init=glorot, name=SAGEConv_2.Wn]
# OPT-NEXT:   %b_1 : param f32[256] = param[init=zeros, name=SAGEConv_2.b]
# OPT-NEXT:   %m_1 : edge f32[E, 256] = src[stage=scatter] %h
# OPT-NEXT:   %a_sum_1 : vertex f32[N, 256] = gather[reduce=sum, stage=gather, to=dst] %m_1
# OPT-NEXT:   %a_1 : vertex f32[N, 256] = mul[stage=gather] %a_sum_1, %inv_degree
# OPT-NEXT:   %3 : vertex f32[N, 256] = matmul[stage=transform] %h, %Ws_1
# OPT-NEXT:   %4 : vertex f32[N, 256] = matmul[stage=transform] %a_1, %Wn_1
# OPT-NEXT:   %t_1 : vertex f32[N, 256] = add[partial=true, stage=transform] %3, %4
# OPT-NEXT:   %s_1 : vertex f32[N, 256] = sync[op=sum, stage=sync] %t_1
# OPT-NEXT:   %out_1 : vertex f32[N, 256] = add[stage=apply] %s_1, %b_1
# OPT-NEXT:   %5 : vertex f32[N, 256] = relu %out_1
# OPT-NEXT:   %h_1 : vertex f32[N, 256] = dropout[p=0.5] %5
# OPT-NEXT:   # SAGEConv_3
# OPT-NEXT:   %Ws_2 : param f32[256, C] = param[init=glorot, name=SAGEConv_3.Ws]
# OPT-NEXT:   %Wn_2 : param f32[256, C] = param[init=glorot, name=SAGEConv_3.Wn]
# OPT-NEXT:   %b_2 : param f32[C] = param[init=zeros, name=SAGEConv_3.b]
# OPT-NEXT:   %m_2 : edge f32[E, 256] = src[stage=scatter] %h_1
# OPT-NEXT:   %a_sum_2 : vertex f32[N, 256] = gather[reduce=sum, stage=gather, to=dst] %m_2
# OPT-NEXT:   %a_2 : vertex f32[N, 256] = mul[stage=gather] %a_sum_2, %inv_degree
# OPT-NEXT:   %6 : vertex f32[N, C] = matmul[stage=transform] %h_1, %Ws_2
# OPT-NEXT:   %7 : vertex f32[N, C] = matmul[stage=transform] %a_2, %Wn_2
# OPT-NEXT:   %t_2 : vertex f32[N, C] = add[partial=true, stage=transform] %6, %7
# OPT-NEXT:   %s_2 : vertex f32[N, C] = sync[op=sum, stage=sync] %t_2
# OPT-NEXT:   %out_2 : vertex f32[N, C] = add[stage=apply] %s_2, %b_2
# OPT-NEXT:   %loss : scalar f32[] = loss[fn=cross_entropy, mask=train] %out_2, %Y
# OPT-NEXT:   return %out_2
# OPT-NEXT: }
