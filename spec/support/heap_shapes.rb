# frozen_string_literal: true

require "json"
require "open3"
require_relative "helpers"

# Randomised heap shapes (spec/fixtures/ext/heap_shapes.c), each built from a seed in a small process
# forked from a server that loaded the gem (spec/fixtures/heap_shapes_server.rb), dumped there in
# process and written to a core by gcore at the dump's last step; then GdbOracle walks the cores.
module HeapShapes
  extend SpecHelpers

  # The parameters, in the order hs_build reads them (hugetlb is the server's environment).
  PARAMS = %i[seed main_ops thread_ops exiters stayers late_threads arena_max mmap_max0 top_pad
              mmap_threshold trim block_brk fork].freeze

  # One shape: what heap_shapes.c builds for a seed.
  Shape = Struct.new(*PARAMS, :hugetlb) do
    # @return [Array<Integer>] the parameters as hs_build reads them
    def to_params
      PARAMS.map { |k| self[k] == true ? 1 : self[k] == false ? 0 : self[k] }
    end

    def describe
      to_h.map { |k, v| "#{k}=#{v}" }.join(" ")
    end
  end

  # Every tenth seed (7, 17, 27, ...) blocks the break: the main arena goes on in mmapped regions
  # (non-contiguous). HEAP_SHAPES_BLOCKED_BRK=0 leaves the block out (the rest of the shape is kept).
  # Not under qemu-user: its break never grows and the page above it cannot be mapped, so every shape
  # there has its main arena in mmapped regions already.
  def self.blocked_brk?(seed)
    seed % 10 == 7 && ENV["HEAP_SHAPES_BLOCKED_BRK"] != "0" && !SpecHelpers.qemu_user?
  end

  # @param seed [Integer]
  # @return [Shape]
  def self.shape(seed)
    r = Random.new(seed)
    Shape.new(
      seed, r.rand(300..3000), r.rand(100..1500),
      [0, 0, 1, 2, 4, 6].sample(random: r),    # threads that exit before the dump: their arenas are reused
      r.rand(0..5),                            # threads alive at the dump, each with its tcache
      r.rand(0..4),                            # threads started after the exits (and after a fork)
      r.rand < 0.25 ? r.rand(1..3) : 0,        # mallopt(M_ARENA_MAX): shared arenas
      r.rand < 0.15,                           # mallopt(M_MMAP_MAX, 0): no mmapped chunks
      r.rand < 0.2 ? [4096, 65_536, 1 << 20].sample(random: r) : 0,         # M_TOP_PAD
      r.rand < 0.25 ? [32_768, 65_536, 262_144, 1 << 20].sample(random: r) : 0, # M_MMAP_THRESHOLD
      r.rand < 0.4,                            # malloc_trim calls among the operations
      blocked_brk?(seed),
      [0, 0, 0, 1, 2].sample(random: r),       # 1: a child allocates and exits; 2: the shape goes on in a child
      r.rand < 0.2                             # GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (THP)
    )
  end

  # The seeds to run: SHAPE_SEED=a,b,... or 1..SHAPES (200 by default).
  def self.seeds
    if ENV["SHAPE_SEED"] then ENV["SHAPE_SEED"].split(",").map { |s| Integer(s) }
    else (1..Integer(ENV.fetch("SHAPES", "200"))).to_a
    end
  end

  SERVER = File.join(SpecHelpers::ROOT, "spec", "fixtures", "heap_shapes_server.rb")
  BATCH = 4
  SETARCH = system("setarch", RbConfig::CONFIG["host_cpu"], "-R", "true", out: File::NULL, err: File::NULL)

  # Builds, dumps and cores every shape, and walks the cores with gdb (one gdb for several cores,
  # while the server builds the next ones); yields each shape with its files and gdb's walk, then
  # deletes them. gdb: false (under qemu-user, where gdb cannot attach): no core and no walk.
  #
  # @yieldparam shape [Shape]
  # @yieldparam files [Hash] :dump, :records, :error, :cored, :gcore_s
  # @yieldparam walk [GdbOracle::Walk, nil]
  def self.each_result(shapes, gdb: true, &block)
    library = build_fixture("heap_shapes", extra_flags: ["-lpthread"])
    # cores are written and read once: in memory where there is a tmpfs for it
    shm = "/dev/shm"
    Dir.mktmpdir("ptmd-shapes", File.writable?(shm) ? shm : nil) do |dir|
      shapes.group_by(&:hugetlb).each do |hugetlb, group|
        env = { "LD_PRELOAD" => library }
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1" if hugetlb
        list = File.join(dir, "shapes-#{hugetlb}.json")
        File.write(list, JSON.generate(group.map { |s| [s.seed, s.to_params] }))
        by_seed = group.to_h { |s| [s.seed, s] }
        run_group(env, dir, list, by_seed, gdb, &block)
      end
    end
  end

  def self.run_group(env, dir, list, by_seed, gdb, &block)
    walking = nil
    batch = []
    finish = lambda do
      return unless walking

      walking.wait.each { |(files, walk)| finish_one(by_seed, files, walk, &block) }
      walking = nil
    end
    cmd = [RbConfig.ruby, "-I", SpecHelpers::LIB, "-rptmalloc_dump", SERVER, dir, list, gdb ? "cores" : "nocore"]
    # without address randomisation a seed lays its mappings out the same way each time it is run
    # first: what depends on where the kernel puts them (merged mappings, mremap in place) repeats
    cmd = ["setarch", RbConfig::CONFIG["host_cpu"], "-R", *cmd] if SETARCH
    Open3.popen3(env, *cmd) do |stdin, out, err, thread|
      stdin.close
      errors = Thread.new { err.read }
      out.each_line do |line|
        files = JSON.parse(line, symbolize_names: true)
        next finish_one(by_seed, files, nil, &block) unless gdb

        batch << files
        next if batch.size < BATCH

        finish.call
        walking = GdbOracle.start(dir, batch)
        batch = []
      end
      finish.call
      walking = GdbOracle.start(dir, batch) unless batch.empty?
      finish.call
      raise "the heap shapes server failed: #{errors.value}" unless thread.value.success?
    end
  end

  def self.finish_one(by_seed, files, walk)
    yield by_seed.fetch(files[:seed]), files, walk
  ensure
    files.values_at(:dump, :core, :records, :error_file).each do |f|
      File.delete(f) if f.is_a?(String) && File.exist?(f)
    end
  end

  REC = "QQLlLL"
  REC_SIZE = 32
  REC_FREED = 1
  REC_BEFORE_FORK = 2
  Record = Struct.new(:ptr, :size, :seq, :thread, :kind, :flags)

  # @return [Array(Array<Record>, Array<Record>, Array<Record>)] the pointers the shape held, those it
  #   freed, and the DTV glibc allocated for each thread it started
  def self.records(path)
    data = File.binread(path)
    counts = data.unpack("Q3")
    recs = Array.new(counts.sum) { |i| Record.new(*data.byteslice(24 + (i * REC_SIZE), REC_SIZE).unpack(REC)) }
    [recs.first(counts[0]), recs[counts[0], counts[1]], recs.last(counts[2])]
  end
end
