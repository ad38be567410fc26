"""What a run leaves, and how to read it back: summary.json (summary), trace.json
(chrometrace), links.csv (links), plots/ (plots), `dtnet report` and `dtnet
compare` (report), pcap files (pcapstats). The formats are in docs/outputs.md."""
