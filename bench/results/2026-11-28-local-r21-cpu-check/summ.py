import json, sys
for f in sys.argv[1:]:
    n=fals=det=0; cr=[]; tr=[]; badr=[]
    for l in open(f):
        r=json.loads(l); n+=1; fals+=bool(r["false"])
        b=[w for w in r["rows"] if w["w"]=="f2"][0]; det+=b["fl"] and not r["false"]; badr.append((b["tr"],b["cr"]))
        for w in r["rows"]:
            if w["w"]!="f2": cr.append(w["cr"]); tr.append(w["tr"])
    print(f.split("/")[-1], "runs", n, "false", fals, "f2 named alone", det, "clean min copy ratio", sorted(cr)[:3], "min tflops ratio", sorted(tr)[:3],
          "f2 ratios (t,c) max", max(x[0] for x in badr), max(x[1] for x in badr))
