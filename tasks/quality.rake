# frozen_string_literal: true

require "fileutils"
require "rbconfig"
require "tmpdir"

# The load direction: what a dump file reaches (ext/ptmalloc_dump/format and analysis).
FUZZ_SOURCES = Dir["ext/ptmalloc_dump/{format,analysis}/*.c"].sort

# The kept corpus and every crasher found: committed, replayed by spec/fuzz_corpus_spec.rb.
FUZZ_CORPUS = "spec/fixtures/fuzz/corpus"
FUZZ_CRASHES = "spec/fixtures/fuzz/crashes"
# Inputs this small that add coverage go into the kept corpus after a run.
FUZZ_KEEP_MAX = 64 * 1024

desc "Fuzz the dump reader with libFuzzer (clang, ASan, UBSan): rake fuzz[SECONDS] (default 60); seeds from " \
     "#{FUZZ_CORPUS} and real dumps, keeps new small inputs there and crashers in #{FUZZ_CRASHES}"
task :fuzz, [:seconds] => [:compile, "tmp/unit/ptmd_unit"] do |_t, args|
  seconds = Integer(args[:seconds] || ENV.fetch("FUZZ_SECONDS", 60))
  FileUtils.mkdir_p(["fuzz/corpus", "tmp/fuzz/work", "tmp/fuzz/small", FUZZ_CORPUS, FUZZ_CRASHES])
  sh "tmp/unit/ptmd_unit", "--corpus", FUZZ_CORPUS
  sh "clang", "-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined",
     "-DPTMD_FUZZ_NO_CRC", "-Iext/ptmalloc_dump", "fuzz/fuzz_reader.c", *FUZZ_SOURCES, "-lpng", "-o", "tmp/fuzz/fuzz_reader"
  # seeds too large to keep (fuzz/corpus, not committed): real dumps, with Ruby data, references and roots
  if Dir.empty?("fuzz/corpus")
    ruby "-Ilib", "-rptmalloc_dump", "-e", <<~RUBY
      PtmallocDump.dump("fuzz/corpus/plain.dump", ruby: false)
      PtmallocDump.dump("fuzz/corpus/ruby.dump")
      t = Thread.new { x = Array.new(1000) { "y" * 300 }; PtmallocDump.dump("fuzz/corpus/threads.dump", ruby: false); x }
      t.join
    RUBY
  end
  unless File.exist?("fuzz/corpus/graph.dump")
    # with the Ruby object graph (RUBY_GRAPH, RUBY_EDGE_COUNTS, RUBY_EDGES, RUBY_ROOTS, RUBY_EDGE_NAMES)
    ruby "-Ilib", "-rptmalloc_dump", "-e", <<~RUBY
      module Seed; TABLE = Array.new(300) { |i| { "k\#{i}" => "v" * i } }; end
      PtmallocDump.dump("fuzz/corpus/graph.dump", graph: true)
    RUBY
  end
  unless File.exist?("fuzz/corpus/noncontiguous.dump")
    # a main arena continued in mmapped regions (heap kind main_mmap): a page mapped right above the
    # break makes sbrk fail
    ruby "-Ilib", "-rptmalloc_dump", "-rfiddle", "-e", <<~RUBY
      f = ->(name, args, ret) { Fiddle::Function.new(Fiddle::Handle::DEFAULT[name], args, ret) }
      page = 4096
      at = (f.("sbrk", [Fiddle::TYPE_INTPTR_T], Fiddle::TYPE_INTPTR_T).call(0) + page - 1) & -page
      f.("mmap", [Fiddle::TYPE_VOIDP, Fiddle::TYPE_SIZE_T, Fiddle::TYPE_INT, Fiddle::TYPE_INT, Fiddle::TYPE_INT,
                  Fiddle::TYPE_LONG], Fiddle::TYPE_VOIDP).call(at, page, 0, 0x100022, -1, 0) # MAP_FIXED_NOREPLACE
      keep = Array.new(3000) { |i| "x" * (100 + (i * 7919) % 20_000) }
      keep = keep.each_slice(2).map(&:first)
      GC.start
      PtmallocDump.dump("fuzz/corpus/noncontiguous.dump", ruby: false)
    RUBY
  end
  unless File.exist?("fuzz/corpus/process.dump")
    # a dump of another process (the SOURCE section)
    ruby "-Ilib", "-rptmalloc_dump", "-e", <<~RUBY
      pid = Process.spawn("sleep", "60")
      begin
        sleep 0.2
        PtmallocDump.dump_process(pid, "fuzz/corpus/process.dump")
      ensure
        Process.kill(:KILL, pid)
        Process.wait(pid)
      end
    RUBY
  end
  unless File.exist?("fuzz/corpus/tracked.dump")
    # under the allocation tracker, sampling often (NATIVE_TRACK to NATIVE_NAMES)
    tracker = { "LD_PRELOAD" => File.expand_path("lib/ptmalloc_dump/ptmalloc_dump_track.so"),
                "PTMALLOC_DUMP_TRACK_BYTES" => "4096" }
    sh tracker, RbConfig.ruby, "-Ilib", "-rptmalloc_dump", "-e", 'PtmallocDump.dump("fuzz/corpus/tracked.dump")'
  end
  unless File.exist?("fuzz/corpus/snapshot.dump")
    # a fork snapshot (the SNAPSHOT section; Ruby's heap recorded by the child)
    ruby "-Ilib", "-rptmalloc_dump", "-e", 'PtmallocDump.dump("fuzz/corpus/snapshot.dump", fork: true, wait: true)'
  end
  sh "tmp/fuzz/fuzz_reader", "-max_total_time=#{seconds}", "-timeout=10", "-rss_limit_mb=4096",
     "-artifact_prefix=#{FUZZ_CRASHES}/", "-print_final_stats=1", "tmp/fuzz/work", FUZZ_CORPUS, "fuzz/corpus"
  # the kept corpus grows by the small inputs of this run that reach code it does not
  FileUtils.rm_rf(Dir["tmp/fuzz/small/*"])
  Dir["tmp/fuzz/work/*"].each { |f| FileUtils.cp(f, "tmp/fuzz/small") if File.size(f) <= FUZZ_KEEP_MAX }
  sh "tmp/fuzz/fuzz_reader", "-merge=1", "-timeout=10", FUZZ_CORPUS, "tmp/fuzz/small"
end

namespace :spec do
  desc "Run the suite against an extension built with UndefinedBehaviorSanitizer, and the reader, " \
       "renderer and CLI specs with AddressSanitizer too"
  task :sanitize do
    # ASan replaces malloc itself, so under ASan this process has no glibc heap to dump (the gem says
    # so: UnsupportedAllocatorError). UBSan keeps glibc's malloc: the whole suite runs under it.
    sh({ "PTMALLOC_DUMP_SANITIZE" => "undefined" }, "rake", "clobber", "compile")
    sh({ "UBSAN_OPTIONS" => "halt_on_error=1:print_stacktrace=1" }, "rspec")
    # the dumps the ASan run reads, made now (under ASan this process has no glibc heap), outside
    # tmp/, which the next clobber removes
    dumps = Dir.mktmpdir("ptmd-sanitize")
    begin
      ruby "-Ilib", "-rptmalloc_dump", "-e", <<~RUBY
        PtmallocDump.dump(#{File.join(dumps, 'plain.dump').dump}, ruby: false)
        PtmallocDump.dump(#{File.join(dumps, 'ruby.dump').dump})
        PtmallocDump.dump(#{File.join(dumps, 'refs.dump').dump}, references: true)
      RUBY
      sh({ "PTMALLOC_DUMP_SANITIZE" => "address,undefined" }, "rake", "clobber", "compile")
      asan = `gcc -print-file-name=libasan.so`.strip
      ubsan = `gcc -print-file-name=libubsan.so`.strip
      # use_sigaltstack=0: Ruby gives each thread a signal stack from malloc, which ASan, on the thread's
      # exit, would try to munmap as if it were its own (and abort when that fails)
      sh({ "LD_PRELOAD" => "#{asan}:#{ubsan}", "ASAN_OPTIONS" => "detect_leaks=0:halt_on_error=1:use_sigaltstack=0",
           "UBSAN_OPTIONS" => "halt_on_error=1:print_stacktrace=1", "PTMALLOC_DUMP_ASAN" => "1",
           "PTMALLOC_DUMP_SANITIZE_DUMPS" => dumps },
         "rspec", "spec/sanitize_reader_spec.rb")
    ensure
      FileUtils.rm_rf(dumps)
    end
    sh "rake", "clobber", "compile"
  end

  desc "The churn example of spec/safety_spec.rb at full length: 500 in-process dumps and 500 fork snapshots " \
       "under four malloc threads (the suite takes 150 of each; SAFETY_CHURN=N picks)"
  task churn: :compile do
    sh({ "SAFETY_CHURN" => ENV.fetch("SAFETY_CHURN", "500") }, "rspec", "spec/safety_spec.rb", "-e", "native threads calling malloc throughout")
  end

  desc "Run the visualizer under valgrind (memcheck) over a real dump"
  task valgrind: :compile do
    FileUtils.mkdir_p("tmp/valgrind")
    ruby "-Ilib", "-rptmalloc_dump", "-e", 'PtmallocDump.dump("tmp/valgrind/v.dump", references: true)'
    FileUtils.rm_rf("tmp/valgrind/out")
    sh "valgrind", "--error-exitcode=3", "--leak-check=no", "--track-origins=yes", "--suppressions=spec/valgrind.supp",
       "--quiet", RbConfig.ruby, "-Ilib", "exe/ptmalloc-visualize", "tmp/valgrind/v.dump", "tmp/valgrind/out"
    sh "valgrind", "--error-exitcode=3", "--leak-check=no", "--suppressions=spec/valgrind.supp", "--quiet",
       RbConfig.ruby, "-Ilib", "exe/ptmalloc-visualize", "--json", "tmp/valgrind/v.dump", out: File::NULL
  end
end
