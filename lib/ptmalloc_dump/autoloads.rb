# frozen_string_literal: true

# What a worker that only dumps needs is loaded now; what reads, compares and renders dumps is loaded
# on first use, so that requiring the gem costs a worker little time and memory.
module PtmallocDump
  # the classes that read dumps, the extension's and their Ruby side
  %i[Format Dump Diff RubyHeap Render].each { |name| autoload name, "ptmalloc_dump/reader" }
  # the records of a dump
  %i[STATES FREE_STATES ChunkFlags Chunk Arena Heap PageMap ThreadInfo Bin Anomaly].each do |name|
    autoload name, "ptmalloc_dump/records"
  end
  autoload :MallocInfo, "ptmalloc_dump/malloc_info"
  autoload :Verification, "ptmalloc_dump/verification"
  autoload :RetainerLines, "ptmalloc_dump/reader"
  autoload :SiteLines, "ptmalloc_dump/reader"
  autoload :SiteFrame, "ptmalloc_dump/reader"
  autoload :NativeSymbols, "ptmalloc_dump/native_symbols"
  autoload :ElfSymbols, "ptmalloc_dump/native_symbols"
  autoload :MallocSites, "ptmalloc_dump/malloc_sites"
  autoload :Tracker, "ptmalloc_dump/tracker"
  autoload :FormatHelpers, "ptmalloc_dump/format_helpers"
  # the signal handler and the cheap readings: loaded when installed or first read
  autoload :SignalHandler, "ptmalloc_dump/signal_handler"
  autoload :Stats, "ptmalloc_dump/stats"
  autoload :Advice, "ptmalloc_dump/advice"
  autoload :Fleet, "ptmalloc_dump/fleet"
  # readings over time: a sampler, Prometheus text, the timeline
  autoload :Sampler, "ptmalloc_dump/sampler"
  autoload :Prometheus, "ptmalloc_dump/prometheus"
  autoload :Timeline, "ptmalloc_dump/timeline"
  # the outputs: text, JSON, the HTML report and the comparison page
  autoload :TextSummary, "ptmalloc_dump/output/text_summary"
  autoload :JsonSummary, "ptmalloc_dump/output/json_summary"
  autoload :Findings, "ptmalloc_dump/output/findings"
  autoload :GrowthFindings, "ptmalloc_dump/output/growth_findings"
  autoload :Geometry, "ptmalloc_dump/output/geometry"
  autoload :ExplorerGeometry, "ptmalloc_dump/output/geometry"
  autoload :Explanation, "ptmalloc_dump/output/explanation"
  autoload :Explorer, "ptmalloc_dump/output/explorer"
  autoload :RetainersSection, "ptmalloc_dump/output/retainers_section"
  autoload :SitesSection, "ptmalloc_dump/output/sites_section"
  autoload :Report, "ptmalloc_dump/output/report"
  autoload :ComparisonReport, "ptmalloc_dump/output/comparison_report"
  autoload :TimelineReport, "ptmalloc_dump/output/timeline_report"
  # the executables
  autoload :DumpCLI, "ptmalloc_dump/dump_cli"
  autoload :VisualizeCLI, "ptmalloc_dump/visualize_cli"
end
