import sys,collections,re,json
c=collections.Counter()
for line in open(sys.argv[1]):
    if '\t' not in line: continue
    n,s=line.rstrip('\n').split('\t',1); n=int(n)
    w=s.strip().split()
    k=' '.join(w[:3]) if w else '?'
    if w and w[0]=='INSERT': k=' '.join(w[:3])
    if w and w[0]=='SELECT': k=' '.join(w[:4])
    c[k]+=n
jobs=float(sys.argv[2]) if len(sys.argv)>2 else 1
print('total',sum(c.values()),'per job',round(sum(c.values())/jobs,1))
for k,v in c.most_common(16): print(v,round(v/jobs,2),k)
