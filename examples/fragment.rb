# frozen_string_literal: true

# The demo: fragments this process's heap the way a long-running Ruby worker does (many short-lived
# strings and arrays, a few survivors pinning pages, native blocks from several threads), then dumps
# it and prints the summary.
#
#   ruby -Ilib examples/fragment.rb [OUTDIR]
require "fiddle"
require "ptmalloc_dump"

outdir = ARGV[0] || "tmp/demo"
Dir.mkdir(outdir) unless Dir.exist?(outdir)

# Ruby objects with malloc'd buffers; keep one in 16 so the rest leave holes behind
survivors = []
200_000.times do |i|
  s = "request-#{i}-" * (4 + (i % 40))
  a = Array.new(10 + (i % 30), i)
  survivors << s << a if (i % 16).zero?
end

# native memory from four threads (four arenas), half of it freed again
blocks = Queue.new
threads = Array.new(4) do |t|
  Thread.new do
    mine = Array.new(20_000) { |i| Fiddle.malloc(32 + ((i * 37 + t) % 2000)) }
    mine.each_with_index { |b, i| i.odd? ? Fiddle.free(b) : blocks << b }
    sleep 0.5 # alive while we dump: their arenas and tcaches are in the picture
  end
end
sleep 0.2
# a few large blocks: mmapped chunks
large = Array.new(4) { |i| Fiddle.malloc((256 + i * 128) * 1024) }

path = File.join(outdir, "demo.dump")
PtmallocDump.dump(path)
threads.each(&:join)
dump = PtmallocDump.load(path)
puts PtmallocDump::TextSummary.new(dump)
puts "", "dump written to #{path} (#{PtmallocDump::FormatHelpers.human_bytes(File.size(path))})"
large.each { |b| Fiddle.free(b) }
Fiddle.free(blocks.pop) until blocks.empty?
survivors.clear
