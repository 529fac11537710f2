# frozen_string_literal: true

# The demo: fragments this process's heap the way a long-running Ruby worker does (many short-lived
# strings and arrays, a few survivors pinning pages, native blocks from several threads), then dumps
# it and prints the summary.
#
#   ruby -Ilib examples/fragment.rb [OUTDIR]
require "fiddle"
require "fileutils"
require "ptmalloc_dump"

outdir = ARGV[0] || "tmp/demo"
FileUtils.mkdir_p(outdir)

# Ruby objects with malloc'd buffers; keep one in 16 so the rest leave holes behind
survivors = []
200_000.times do |i|
  s = "request-#{i}-" * (4 + (i % 40))
  a = Array.new(10 + (i % 30), i)
  survivors << s << a if (i % 16).zero?
end

# native memory from four threads (four arenas), half of it freed again; each thread says when it is
# done and stays alive until the dump is written, so its arena and tcache are in the picture
blocks = Queue.new
done = Queue.new
dumped = Queue.new
threads = Array.new(4) do |t|
  Thread.new do
    mine = Array.new(20_000) { |i| Fiddle.malloc(32 + ((i * 37 + t) % 2000)) }
    mine.each_with_index { |b, i| i.odd? ? Fiddle.free(b) : blocks << b }
    done << t
    dumped.pop
  end
end
4.times { done.pop }
# a few large blocks: mmapped chunks
large = Array.new(4) { |i| Fiddle.malloc((256 + i * 128) * 1024) }

path = File.join(outdir, "demo.dump")
PtmallocDump.dump(path)
4.times { dumped << true }
threads.each(&:join)
dump = PtmallocDump.load(path)
puts PtmallocDump::TextSummary.new(dump)
puts "", "dump written to #{path} (#{PtmallocDump::FormatHelpers.human_bytes(File.size(path))})"
large.each { |b| Fiddle.free(b) }
Fiddle.free(blocks.pop) until blocks.empty?
survivors.clear
