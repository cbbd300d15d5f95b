import json,sys,glob
for f in sorted(glob.glob(sys.argv[1])):
    if f.endswith('dbg.jsonl'): continue
    d=json.load(open(f)); print(f)
    for k in ('clean','slow','default_clean','half'):
        for r in d[k]:
            print(' ',k, r['seconds'], r['median_cross_host_gbps'], r['flag_cross_host_gbps'], r['min_ratio'], r['named_hosts'], r['not_healthy'], r.get('rate'), r.get('slow_host_best_ratio'), len(r['flagged_links']))
