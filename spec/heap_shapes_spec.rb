# frozen_string_literal: true

require "spec_helper"

# Randomised heap shapes against two oracles at once: glibc's counters (mallinfo2, malloc_info) and
# glibc's own lists and heaps walked by gdb in a core written at the dump's last step. Under qemu-user
# (an arm64 chroot), where gdb cannot attach, against the counters and the shape's pointers. Each shape's
# seed rebuilds it: SHAPE_SEED=17 bundle exec rspec spec/heap_shapes_spec.rb (SHAPES=N runs seeds 1..N;
# rake spec:shapes[N] too).
RSpec.describe "heap shapes against gdb's walk of a core" do
  # The shapes' outcomes, seed => { problems:, chunks:, pointers: }; all of them built once.
  def self.outcomes
    @outcomes ||= {}
  end

  def self.totals
    @totals ||= Hash.new(0)
  end

  # gdb, the second oracle, where it can attach to a process
  def self.gdb?
    !SpecHelpers.qemu_user?
  end

  def self.run_all(shapes)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    HeapShapes.each_result(shapes, gdb: gdb?) do |shape, files, walk|
      outcomes[shape.seed] = outcome(shape, files, walk)
      totals[:shapes] += 1
      totals[:chunks] += outcomes[shape.seed][:chunks]
      totals[:pointers] += outcomes[shape.seed][:pointers]
      totals[:orphaned] += outcomes[shape.seed][:orphaned]
    end
    totals[:seconds] = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  end

  def self.outcome(shape, files, walk)
    result = { problems: [], chunks: 0, pointers: 0, orphaned: 0 }
    error = files[:error]
    return result.merge(problems: ["the shape failed: #{error}"]) if error && !error.empty?

    if gdb?
      return result.merge(problems: ["no core was written (gcore failed)"]) unless files[:cored]
      return result.merge(problems: ["gdb did not walk the core: #{files[:gdb_log].to_s[-2000..]}"]) unless walk
    end

    dump = PtmallocDump.load(files[:dump])
    verification = dump.verify
    problems = verification.differences.map { |d| "verify: #{d}" } + verification.anomalies.map { |a| "anomaly: #{a}" }
    problems << "verify: not ok" unless verification.ok?
    problems << "verify: glibc's counters were not taken" if verification.compared.empty?
    if walk
      comparison = GdbOracle.compare(dump, walk, threads_gone: shape.fork == 2)
      result[:chunks] = comparison[:compared]
      result[:orphaned] = comparison[:orphaned]
      problems.concat(comparison[:differences])
    else
      result[:chunks] = dump.chunk_count # checked against the counters alone
    end
    held, freed, dtvs = HeapShapes.records(files[:records])
    result[:pointers] = held.size + freed.size
    problems.concat(pointer_problems(dump, held, freed, dtvs, forked: shape.fork == 2))
    result.merge(problems: problems)
  end

  # Every pointer the shape holds is an allocated chunk at its own header; every pointer it freed lies
  # in free memory, in memory glibc gave back, or in a chunk allocated after the free: by the shape, or
  # by glibc for a thread started later (its DTV, its tcache_perthread_struct).
  #
  # In a fork child (forked: true) the threads left behind took chunks that the records cannot all
  # name (carved from freed blocks, then freed into their tcaches, reused again): there a freed
  # pointer inside an in-use chunk that starts before it is left to gdb's check of that chunk.
  def self.pointer_problems(dump, held, freed, dtvs, forked: false)
    problems = []
    live = held.to_h { |r| [r.ptr, r] }
    glibc = dtvs.to_h { |r| [r.ptr, r] }
    held.each do |r|
      c = dump.chunk_at(r.ptr - 16)
      next if c && %i[in_use mmapped].include?(c.state) && c.size >= r.size + 8

      problems << "held 0x#{r.ptr.to_s(16)} (#{r.size} B, kind #{r.kind}): #{c.inspect}"
    end
    last_free = freed.group_by(&:ptr).transform_values { |frees| frees.max_by(&:seq) }
    # what threads the fork left behind had freed into their tcaches: allocated for good
    orphaned = last_free.select { |_, f| f.flags.anybits?(HeapShapes::REC_BEFORE_FORK) && f.thread >= 0 }
    last_free.each_value do |r|
      next if live[r.ptr] && live[r.ptr].seq > r.seq

      c = dump.chunk_containing(r.ptr - 16)
      next if c.nil? && dump.heaps.none? { |h| h.range.cover?(r.ptr - 16) }
      next if c&.free?
      next if c && (owner = live[c.user_address] || glibc[c.user_address] || orphaned[c.user_address]) &&
              owner.seq > r.seq
      next if c && orphaned[r.ptr] && c.address == r.ptr - 16
      next if c && forked && c.state == :in_use && c.address < r.ptr - 16
      # a thread started after the free took it for its tcache_perthread_struct
      next if c&.tcache_struct?
      # freed into top, whose end glibc later closed with fenceposts: sbrk failed (a blocked break), or
      # the arena moved on to a new heap. gdb's walk checks the fencepost itself
      next if c && c.state == :meta && c.size == 16
      # an mmapped block's mapping goes with its free: a mapping there now is a later allocation's (a
      # chunk at another address, or the stale lead before an aligned one)
      next if c && c.heap.kind == :mmapped_chunk && (c.state == :meta || c.address != r.ptr - 16)

      problems << "freed 0x#{r.ptr.to_s(16)} (#{r.size} B by thread #{r.thread}, seq #{r.seq}): #{c.inspect}; " \
                  "records in that chunk: #{records_within(c, held, freed, dtvs)}"
    end
    problems
  end

  # What the shape recorded at addresses within chunk c, oldest first: to tell whose block it is.
  def self.records_within(chunk, held, freed, dtvs)
    return "none (no chunk)" unless chunk

    range = chunk.address...chunk.end_address
    found = [[held, "held"], [freed, "freed"], [dtvs, "dtv"]].flat_map do |list, what|
      list.select { |x| range.cover?(x.ptr) }.map do |x|
        [x.seq, "#{what} 0x#{x.ptr.to_s(16)} #{x.size} B kind #{x.kind} thread #{x.thread} flags #{x.flags} seq #{x.seq}"]
      end
    end
    found.empty? ? "none" : found.sort.map(&:last).join(", ")
  end

  before(:all) do
    missing = self.class.gdb? && GdbOracle.missing
    raise "the gdb oracle needs #{missing}" if missing

    self.class.run_all(HeapShapes.seeds.map { |s| HeapShapes.shape(s) })
  end

  after(:all) do
    t = self.class.totals
    oracle = self.class.gdb? ? "compared with gdb" : "checked against glibc's counters (no gdb under qemu-user)"
    puts format("\nheap shapes: %<shapes>d shapes, %<chunks>d chunks %<oracle>s (%<orphaned>d of them in the " \
                "tcaches of threads a fork left behind), %<pointers>d pointers checked, %<seconds>.1f s",
                shapes: t[:shapes], chunks: t[:chunks], oracle: oracle, orphaned: t[:orphaned], pointers: t[:pointers],
                seconds: t[:seconds])
  end

  HeapShapes.seeds.each do |seed|
    shape = HeapShapes.shape(seed)
    it "agrees with #{gdb? ? 'gdb and ' : ''}glibc's counters on every chunk, and finds every pointer (seed #{seed}" \
       "#{shape.block_brk ? ', blocked brk' : ''})" do
      outcome = self.class.outcomes.fetch(seed)
      expect(outcome[:problems]).to be_empty,
                                    "SHAPE_SEED=#{seed} bundle exec rspec spec/heap_shapes_spec.rb\n" \
                                    "shape: #{shape.describe}\n#{outcome[:problems].size} problems, the first:\n" \
                                    "#{outcome[:problems].first(12).join("\n")}"
      expect(outcome[:chunks]).to be > 0
    end
  end
end
