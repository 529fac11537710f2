# frozen_string_literal: true

# Randomised heaps built by native threads (NativeThreads) so that several arenas, tcaches, bins and
# mmapped chunks exist, with a record of every pointer malloc returned.
class HeapScenario
  MIN = 16
  MAX = 1 << 20

  attr_reader :live, :freed, :freed_by, :tids

  # @param seed [Integer]
  # @param threads [Integer] extra native threads besides the calling one
  # @param allocations [Integer]
  # @param max [Integer] the largest request (sizes are log-uniform from MIN)
  def initialize(seed, threads:, allocations: 300, max: MAX)
    @rng = Random.new(seed)
    @threads = threads
    @allocations = allocations
    @max = max
    @live = {}    # user address => requested size
    @freed = {}   # user address => requested size
    @freed_by = {} # user address => the thread that freed it (-1: the calling thread)
    @tids = Array.new(threads) { |i| NativeThreads.start(i) }
  end

  # Mallocs, then frees half of it. A block given runs between the two (nothing is freed yet).
  def build
    sizes = Array.new(@allocations) { random_size }
    sizes.chunk_while { |_, _| @rng.rand < 0.8 }.each do |batch|
      NativeThreads.malloc(random_thread, batch).zip(batch) { |addr, size| @live[addr] = size }
    end
    yield if block_given?
    to_free = @live.keys.shuffle(random: @rng).first(@live.size / 2) # rubocop:disable Style/Sample -- the seed's shapes
    # every free is prepared before the first one runs, and the record of what is freed too: an
    # allocation between a free and the dump may legitimately reuse the freed chunk
    threads = to_free.chunk_while { |_, _| @rng.rand < 0.8 }.flat_map { |batch| [random_thread] * batch.size }
    plan = NativeThreads.prepare_free_plan(threads, to_free)
    to_free.each { |a| @freed[a] = @live[a] }
    to_free.zip(threads) { |a, t| @freed_by[a] = t }
    to_free.each { |a| @live.delete(a) }
    plan.call
    self
  end

  def cleanup
    NativeThreads.prepare_free(-1, @live.keys).call
    @live.clear
    @threads.times { |i| NativeThreads.stop(i) }
  end

  private

  # -1 is the calling thread, 0... the workers
  def random_thread
    @rng.rand(@threads + 1) - 1
  end

  # log-uniform from 16 B to max (1 MiB by default, so mmapped sizes (>= 128 KiB) appear in most scenarios)
  def random_size
    (MIN * (2**(@rng.rand * Math.log2(@max / MIN)))).to_i
  end
end
