import sys, collections
recs=[l.split() for l in open(sys.argv[1])]
# user peer = the one with GetJob calls
peers=collections.Counter(r[2] for r in recs if r[1]=='GetJob')
user=peers.most_common(1)[0][0]
t_start=min(float(r[0]) for r in recs if r[2]==user)
def pct(v,q): v=sorted(v); return v[min(len(v)-1,int(len(v)*q))] if v else 0
for m in ('SubmitJob','GetJob','ListWorkers','CancelJob'):
  for who in ('user','bulk'):
    rs=[r for r in recs if r[1]==m and ((r[2]==user)==(who=='user')) and float(r[0])>=t_start]
    if not rs: continue
    w=[float(r[3]) for r in rs]; b=[float(r[4]) for r in rs]; a=[float(r[5]) for r in rs]; tot=[x+y+z for x,y,z in zip(w,b,a)]
    print(f"{m:12s}{who:5s} n={len(rs):5d} wait p50/p99/max {pct(w,.5):6.1f}/{pct(w,.99):6.1f}/{max(w):6.1f}  body {pct(b,.5):6.1f}/{pct(b,.99):6.1f}/{max(b):6.1f}  back {pct(a,.5):5.1f}/{pct(a,.99):6.1f}  total {pct(tot,.5):6.1f}/{pct(tot,.99):6.1f}")
    # of the slowest 1%: which phase dominated
    slow=sorted(zip(tot,w,b,a))[-max(1,len(tot)//100):]
    print(f"   slowest 1%: mean wait {sum(s[1] for s in slow)/len(slow):.1f} body {sum(s[2] for s in slow)/len(slow):.1f} back {sum(s[3] for s in slow)/len(slow):.1f}")
