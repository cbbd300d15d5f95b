import collections, sys
threads=collections.Counter(); leaf=collections.defaultdict(collections.Counter)
depth=int(sys.argv[2]) if len(sys.argv)>2 else 3
for line in open(sys.argv[1]):
    stack, n = line.rsplit(' ',1); n=int(n)
    frames=stack.split(';')
    t=frames[0].split(':')[-1].strip()
    threads[t]+=n
    leaf[t][' <- '.join(f.split(' (')[0] + ':' + f.rsplit(':',1)[-1].rstrip(')') for f in frames[-1:-1-depth:-1])]+=n
for t,n in threads.most_common(8):
    print(t, n)
    for k,v in leaf[t].most_common(10): print('    ', v, k[:260])
